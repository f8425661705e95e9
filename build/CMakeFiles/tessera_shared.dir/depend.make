# Empty dependencies file for tessera_shared.
# This may be replaced when dependencies are built.
