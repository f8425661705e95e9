# Empty dependencies file for test_tensor.
# This may be replaced when dependencies are built.
