"""pytest configuration. ``ferrite_ref`` and the fixture scripts come from the
installed package (``pip install -e 'tools/python[test]'``, what ``cargo xtask
test`` does); ``helpers`` sits beside the tests (pytest puts this directory on
the path)."""
