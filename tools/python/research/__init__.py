"""Research notebooks of the project: the state study's run registry
(``study_runs``) and the device rounds (``rounds/``). Not installed by
pyproject.toml; import it from tools/python (see README.md here)."""
