"""Model sources that need a framework: PyTorch (torch.onnx) and scikit-learn (skl2onnx)."""
