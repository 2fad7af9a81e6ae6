"""Data set schemas and the tiny data's generators, for the data stages (stages.data.tiny, stages.data.prepare)."""
