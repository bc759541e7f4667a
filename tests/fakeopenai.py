"""Moved to :mod:`tests.support.fakeopenai`; this name stays for code written before the move."""

import sys

import tests.support.fakeopenai

sys.modules[__name__] = tests.support.fakeopenai
