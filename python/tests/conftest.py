import os
import sys

# The tests import helper modules that sit beside them (reference.py, hf_reference.py).
sys.path.insert(0, os.path.dirname(__file__))
