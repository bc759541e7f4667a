"""Moved to :mod:`tests.support.pgserver`; this name stays for code written before the move."""

import sys

import tests.support.pgserver

sys.modules[__name__] = tests.support.pgserver
