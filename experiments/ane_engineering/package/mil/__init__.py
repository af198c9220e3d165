"""One MIL module: everything the harness knows about a saved ML program package, read without Core ML.

    container.py  the .mlpackage directory: no symlinks or special files, Core ML's Manifest.json items inside
                  Data/, the root model and weights directory it names, and a link-free private copy
    blobs.py      weight.bin: the 64-byte storage header and blob headers (sentinel, dtype, size, offset)
    spec_check.py the program in model.mlmodel before PyMIL builds it: known op types and opsets, variables defined
                  before use, every const's blob agreeing with its type, a description matching the function
    load.py       load_program: the checked package as a PyMIL program with its inputs and outputs (LoadedProgram)
    walk.py       every op in program order, nested blocks included, and a rewrite loop for graph passes
    tensors.py    vars: numpy storage dtypes, static and fixed shapes, dtype sizes, constants and their stored bytes
    errors.py     ProgramLoadError: a package that cannot be read back as an ML program

Every reader of a package goes through load.py (the executor, the static rules, the cost model, the palettizer,
reweight), so each check is made once, for all of them.
"""
