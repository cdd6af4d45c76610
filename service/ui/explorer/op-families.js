// Op families: which kind of work a node does, so that the drawing reads at a
// glance (each family its own fill, explorer.css `.family-*`, and a legend of
// those the graph uses), by the op's type; an op of another domain than
// ONNX's and ONNX-ML's that is none of these is "custom".

const MEMBERS = {
  conv: "Conv ConvTranspose ConvInteger DeformConv MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool MaxRoiPool RoiAlign MaxUnpool Col2Im",
  activation: "Relu LeakyRelu PRelu Sigmoid HardSigmoid Tanh Elu Selu Celu Gelu FastGelu BiasGelu QuickGelu Softplus Softsign Softmax LogSoftmax Hardmax HardSwish Mish ThresholdedRelu Swish",
  normalization: "BatchNormalization InstanceNormalization LayerNormalization GroupNormalization LpNormalization MeanVarianceNormalization RMSNormalization SkipLayerNormalization SimplifiedLayerNormalization Dropout",
  shape: "Reshape Transpose Flatten Squeeze Unsqueeze Concat Split Slice Gather GatherElements GatherND Scatter ScatterElements ScatterND Expand Tile Pad Shape Size Identity Resize Upsample DepthToSpace SpaceToDepth ConstantOfShape Constant Cast CastLike Range NonZero Compress ReverseSequence OneHot Trilu CenterCropPad SplitToSequence ConcatFromSequence SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength Optional OptionalGetElement OptionalHasElement",
  arithmetic: "Add Sub Mul Div Pow Sqrt Exp Log Abs Neg Reciprocal Floor Ceil Round Min Max Mean Sum MatMul Gemm Einsum Erf Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Sign Mod Clip CumSum Det BitShift BitwiseAnd BitwiseOr BitwiseXor BitwiseNot Equal Less LessOrEqual Greater GreaterOrEqual And Or Not Xor Where IsNaN IsInf ArgMax ArgMin TopK ReduceMax ReduceMin ReduceMean ReduceSum ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceSumSquare",
  control: "If Loop Scan SequenceMap",
  quantization: "QuantizeLinear DequantizeLinear DynamicQuantizeLinear QLinearConv QLinearMatMul MatMulInteger MatMulNBits QLinearAdd QLinearMul DynamicQuantizeMatMul",
};

export const FAMILIES = [
  ["conv", "convolution and pooling"],
  ["activation", "activation"],
  ["normalization", "normalization"],
  ["shape", "shape and layout"],
  ["arithmetic", "arithmetic"],
  ["control", "control flow"],
  ["quantization", "quantization"],
  ["custom", "custom domains"],
  ["other", "other"],
];

const FAMILY_OF = new Map();
for (const [family, names] of Object.entries(MEMBERS)) for (const name of names.split(" ")) FAMILY_OF.set(name, family);
const ONNX_DOMAINS = new Set(["", "ai.onnx", "ai.onnx.ml"]);

// `domain`, `opType`: a node's; the family's short name (a CSS class suffix).
// An op known by its type keeps its family in any domain (com.microsoft's
// SkipLayerNormalization normalizes); an unknown one is custom outside ONNX's domains.
export function opFamily(domain, opType) {
  return FAMILY_OF.get(opType) || (ONNX_DOMAINS.has(domain || "") ? "other" : "custom");
}
