"""Deciding before an answer runs: the router's level, the preset's parent and drafts, where each tier's
layers go, and which catalogue models fit this machine. Imports the decode core and below."""
