"""Model builders: the paper's WideResNet and DynamicConv Transformer, torchvision's networks
for 32x32 images, `segments` for checkpointed segments, `chain` for checkpoints placed along a
chain's time-memory frontier, `strategies` for the checkpointing strategies' names and their one
check, and `layers` for the layer types that hold weight matrices. Models know no task or
technique."""
