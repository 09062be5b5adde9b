"""Data sets generated on the spot (nothing is downloaded): traffic speeds for seed 004."""
