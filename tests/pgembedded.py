"""Moved to :mod:`testkit.pgembedded` (bench/ shares it); this name stays for code written before the move."""

import sys

import testkit.pgembedded

sys.modules[__name__] = testkit.pgembedded
