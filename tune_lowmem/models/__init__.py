"""Model builders: the paper's WideResNet and DynamicConv Transformer, torchvision's networks
for 32x32 images, and `segments` for checkpointed segments. Models know no task or technique."""
