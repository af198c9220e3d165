"""The evidence logic of the scripts in benchmarks/: each module here runs one benchmark (exporting, running and
validating packages as it needs) and returns its evidence document; the script is a thin command-line wrapper."""
