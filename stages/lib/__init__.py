"""The library the stages are built from: configs, the stage table, formats, rewards, generation, data schemas,
artifacts. Nothing here runs as a stage, and nothing here imports a stage module (tests/test_lint.py)."""
