"""The exit codes of every command, as the C++ CLI's (docs/DESIGN.md §5)."""

EXIT_PASS = 0  # every check passed
EXIT_FAIL = 1  # a numeric failure: a value outside its tolerance
EXIT_MISMATCH = 2  # a structural mismatch: a tensor or file on one side only, a dtype or shape change
EXIT_BAD_INPUT = 3  # the input cannot be judged: one `error:` line naming the fix
