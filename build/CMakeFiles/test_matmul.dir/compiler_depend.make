# Empty compiler generated dependencies file for test_matmul.
# This may be replaced when dependencies are built.
