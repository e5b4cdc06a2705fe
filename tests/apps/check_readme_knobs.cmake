# tests/apps/check_readme_knobs.cmake: README's environment table equals what
# `zt-train --help-env=markdown` prints from the knob table (so the README cannot drift).
execute_process(COMMAND ${ZT} --help-env=markdown OUTPUT_VARIABLE gen RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "zt-train --help-env=markdown failed (${rc})")
endif()
file(READ ${README} readme)
string(REGEX MATCH "<!-- knobs:begin -->\n(.*)<!-- knobs:end -->" m "${readme}")
if(NOT CMAKE_MATCH_1 STREQUAL gen)
  message(FATAL_ERROR "README.md knob table is stale; regenerate it between the knobs markers "
                      "with: zt-train --help-env=markdown\n--- generated ---\n${gen}")
endif()
message(STATUS "README knob table matches the knob table")
