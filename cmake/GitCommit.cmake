# Writes OUT with #define GDNV_GIT_COMMIT "<commit>[-dirty]" ("unknown" outside a git checkout), and
# only when the text changes, so a build after a commit records that commit without rebuilding more.
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no OUTPUT_VARIABLE changes ERROR_QUIET)
  if(NOT changes STREQUAL "")
    set(commit "${commit}-dirty")
  endif()
endif()
file(CONFIGURE OUTPUT "${OUT}" CONTENT "#pragma once\n#define GDNV_GIT_COMMIT \"${commit}\"\n")
