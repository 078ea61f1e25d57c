"""The package's version: the library's gdn_version(), which is also what pip recorded."""
import re
from importlib import metadata

import gdn


def test_version_is_the_librarys_and_the_distributions():
    assert re.fullmatch(r"\d+\.\d+\.\d+", gdn.__version__)
    assert gdn.__version__ == metadata.version("gdn")
