# Empty dependencies file for tessera.
# This may be replaced when dependencies are built.
