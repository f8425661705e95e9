# Empty compiler generated dependencies file for test_params.
# This may be replaced when dependencies are built.
