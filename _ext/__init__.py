"""Compiled cores of logtide (Cython). Import the public names from `logtide`."""
