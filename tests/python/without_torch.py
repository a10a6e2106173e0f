"""Runs test_loader.py as on a machine without torch: `import torch` fails,
so the package must fall back to NumPy and the torch tests must skip."""
import os
import sys
import unittest

sys.modules["torch"] = None  # makes `import torch` raise ImportError
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import prepflow  # noqa: E402
import test_loader  # noqa: E402

assert prepflow.torch is None and test_loader.torch is None
unittest.main(module=test_loader, argv=[sys.argv[0]])
