"""Moved to :mod:`tests.support.synapse`; this name stays for code written before the move."""

import sys

import tests.support.synapse

sys.modules[__name__] = tests.support.synapse
