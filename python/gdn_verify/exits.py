"""The exit codes of every command, as the C++ CLI's (docs/DESIGN.md §5)."""

EXIT_PASS = 0  # every check passed
EXIT_FAIL = 1  # a numeric failure: a value outside its tolerance
EXIT_MISMATCH = 2  # a structural mismatch: a tensor or file on one side only, a dtype or shape change
EXIT_BAD_INPUT = 3  # the input cannot be judged: one `error:` line naming the fix


class Mismatch(Exception):
    """A structural mismatch met while running the library under test (a gradient it never produced): the
    command's verdict, exit 2, where any other exception of a rank is bad input (gdn_verify.world)."""

    exit_code = EXIT_MISMATCH
