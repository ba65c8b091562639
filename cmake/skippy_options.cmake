# Compile options shared by every skippy target.
#
# -ffp-contract=off: the compiler must never fuse a*b+c on its own. Batch invariance
# (DESIGN §4) needs every output element reduced with the same operations whichever
# code path computes it; fused multiply-adds appear only where we write them.
add_library(skippy_options INTERFACE)
target_compile_options(skippy_options INTERFACE
  -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wconversion -Wno-sign-conversion
  -ffp-contract=off -fno-math-errno)
target_include_directories(skippy_options INTERFACE ${PROJECT_SOURCE_DIR}/src)

if(SKIPPY_SANITIZE)
  target_compile_options(skippy_options INTERFACE -fsanitize=${SKIPPY_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(skippy_options INTERFACE -fsanitize=${SKIPPY_SANITIZE})
endif()

# skippy_hot_part(TARGET): the parts whose loops dominate the tests' run time (kernels,
# forward pass, tokenizer, grammar) stay at -O1 in sanitizer builds, which CI compiles at -O0 to
# halve their compile time; -O1 is what the sanitizers' documentation recommends anyway.
function(skippy_hot_part target)
  if(SKIPPY_SANITIZE)
    target_compile_options(${target} PRIVATE -O1)
  endif()
endfunction()

# skippy_add_part(NAME SOURCES...): one library target per part, named skippy_<part>.
function(skippy_add_part name)
  add_library(skippy_${name} STATIC ${ARGN})
  target_link_libraries(skippy_${name} PUBLIC skippy_options)
endfunction()
