// The template parser (internal to the jinja part): jinja2's grammar for the statements
// and expressions of our subset, with its operator precedence.
#pragma once

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/jinja.h"
#include "jinja/lexer.h"

#include <vector>

namespace skippy::jinja::detail {

// Parses the tokens of prog.source into prog.body.
// Errors: invalid_data (syntax, unknown tag / filter / test), unsupported (a construct
// outside the subset), both positioned; nesting beyond opts.lim.max_nesting.
status parse_program(program & prog, std::vector<token> tokens, const parse_options & opts);

}  // namespace skippy::jinja::detail
