"""What the tests share and is not a test: harnesses, generated cases, data.

Imported as `support.<module>`: tests/conftest.py puts tests/ on sys.path.
"""
