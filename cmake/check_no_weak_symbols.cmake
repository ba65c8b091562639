# Fails when an object of LIBRARY whose name matches PATTERN defines a weak or unique
# symbol (nm types W, w, V, v, u). Such a symbol may be an inline function compiled
# with instructions the CPU lacks and chosen by the linker for the whole program.
# Usage: cmake -DNM=nm -DLIBRARY=lib.a -DPATTERN=avx2_ -P check_no_weak_symbols.cmake
execute_process(COMMAND ${NM} -A --defined-only ${LIBRARY} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIBRARY}")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(n_objects 0)
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "${PATTERN}[^:]*\\.o(bj)?:")
    math(EXPR n_objects "${n_objects} + 1")
    # DW.ref.* are weak data words the unwinder uses (the exception personality, e.g.
    # with sanitizers on), and _ZTI* / _ZTS* are type_info objects and their names (clang's
    # UBSan emits them for function types, to check indirect calls): data, not code, so no
    # instruction the CPU might lack.
    if(line MATCHES " [WwVvu] " AND NOT line MATCHES " (DW\\.ref\\.|_ZT[IS])")
      string(APPEND bad "${line}\n")
    endif()
  endif()
endforeach()
if(n_objects EQUAL 0)
  message(FATAL_ERROR "no symbols from objects matching '${PATTERN}' in ${LIBRARY}")
endif()
if(bad)
  message(FATAL_ERROR "weak symbols in objects matching '${PATTERN}':\n${bad}")
endif()
message(STATUS "no weak symbols in objects matching '${PATTERN}'")
