"""Plugins, one module each, named for what they decide."""
