// Reference testing of src/jinja against jinja2 (tests/jinja/jinja_oracle.py run with
// Debian's python3-jinja2): a case is a template and a context; both renderers render
// it and the results must agree byte for byte (or both fail the same way).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace skippy::jinja::testing {

struct jinja_case {
    std::string            name;
    std::string            source;
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    bool                   trim_blocks = true;
    bool                   lstrip_blocks = true;
    std::string            now = "2025-03-14T15:09:26";  // what strftime_now formats
};

// How a renderer finished a case: output, or an error of kind "syntax" (parse),
// "raise" (raise_exception, with its message) or "render" (any other render error).
struct outcome {
    bool        ok = false;
    std::string output;
    std::string error;    // "syntax" | "raise" | "render"
    std::string message;
};

// Cases of a corpus file (tests/jinja/*.txt, format in corpus_file.h).
std::vector<jinja_case> load_corpus(const std::string & path);

// The Python interpreter with jinja2, or nullopt (SKIPPY_PYTHON, /usr/bin/python3, PATH).
std::optional<std::string> find_python_with_jinja2();

// jinja2's outcomes, in case order; nullopt and `why` when the oracle cannot run.
std::optional<std::vector<outcome>> run_oracle(const std::vector<jinja_case> & cases, std::string & why);

// Our outcome for a case.
outcome render_ours(const jinja_case & c);

// Compares both sides of every case with gtest expectations; returns how many agree
// (outputs byte-identical, or the same error kind, and the same message for "raise").
size_t expect_same(const std::vector<jinja_case> & cases, const std::vector<outcome> & theirs);

std::string test_dir();  // tests/jinja in the source tree

std::string read_file(const std::string & path);

// One case per conversation of tests/jinja/conversations.json, rendering `source` named
// `template_name`, with bos_token / eos_token added to each context.
std::vector<jinja_case> conversation_cases(const std::string & template_name, const std::string & source,
                                           const std::string & bos_token, const std::string & eos_token);

}  // namespace skippy::jinja::testing

// Declares `var` as jinja2's outcomes for `cases`, or skips (fails under CI) when
// python3-jinja2 is missing.
#define SKIPPY_REQUIRE_ORACLE(var, cases)                                                          \
    std::vector<::skippy::jinja::testing::outcome> var;                                           \
    do {                                                                                           \
        std::string skippy_why_;                                                                   \
        auto skippy_res_ = ::skippy::jinja::testing::run_oracle(cases, skippy_why_);                \
        if (!skippy_res_) {                                                                        \
            if (::skippy::testing::running_in_ci()) FAIL() << "jinja2 oracle unavailable (CI): " << skippy_why_; \
            GTEST_SKIP() << "jinja2 oracle unavailable: " << skippy_why_ << " (install python3-jinja2)"; \
        }                                                                                          \
        var = std::move(*skippy_res_);                                                             \
    } while (0)
