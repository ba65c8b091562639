// The corpus file format of tests/jinja/*.txt, shared by the reference tests and the
// fuzzer's seed writer (no gtest here).
//
//   ### name [json] [notrim]     starts a case
//   <template lines>             joined with "\n", no trailing newline
//   --- {context JSON}           ends it (an empty context is {})
//
// With "json" the template is the single line that follows, a JSON string (for
// templates with trailing newlines or CRs); "notrim" renders with trim_blocks and
// lstrip_blocks off. Lines before the first case are comments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace skippy::jinja::testing {

struct corpus_entry {
    std::string name;
    std::string source;
    std::string context_json;  // "" for {}
    bool        trim = true;   // trim_blocks and lstrip_blocks
};

// The cases of `text`; false with `error` set on a malformed file.
bool parse_corpus(std::string_view text, std::vector<corpus_entry> & out, std::string & error);

}  // namespace skippy::jinja::testing
