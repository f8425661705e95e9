# Empty dependencies file for test_base.
# This may be replaced when dependencies are built.
