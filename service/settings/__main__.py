"""`python -m service.settings`: print the README's settings table from the declarations."""

from service.settings import settings_table_markdown

print(settings_table_markdown(), end="")
