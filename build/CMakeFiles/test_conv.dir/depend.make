# Empty dependencies file for test_conv.
# This may be replaced when dependencies are built.
