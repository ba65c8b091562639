#include "oracle.h"

#include "corpus_file.h"

#include "common/test_data.h"
#include "jinja/jinja.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace skippy::jinja::testing {

std::string test_dir() { return SKIPPY_JINJA_TEST_DIR; }

std::string read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << "cannot read " << path;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<jinja_case> conversation_cases(const std::string & template_name, const std::string & source,
                                           const std::string & bos_token, const std::string & eos_token) {
    auto all = nlohmann::ordered_json::parse(read_file(test_dir() + "/conversations.json"));
    std::vector<jinja_case> out;
    for (const auto & [name, context] : all.items()) {
        if (name[0] == '_') continue;
        jinja_case c;
        c.name = template_name + "/" + name;
        c.source = source;
        c.context = context;
        c.context["bos_token"] = bos_token;
        c.context["eos_token"] = eos_token;
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<jinja_case> load_corpus(const std::string & path) {
    std::vector<corpus_entry> entries;
    std::string error;
    EXPECT_TRUE(parse_corpus(read_file(path), entries, error)) << path << ": " << error;
    std::vector<jinja_case> cases;
    for (auto & e : entries) {
        jinja_case c;
        c.name = e.name;
        c.source = e.source;
        c.trim_blocks = c.lstrip_blocks = e.trim;
        if (!e.context_json.empty()) c.context = nlohmann::ordered_json::parse(e.context_json);
        cases.push_back(std::move(c));
    }
    return cases;
}

std::optional<std::string> find_python_with_jinja2() {
    std::vector<std::string> candidates;
    if (const char * p = std::getenv("SKIPPY_PYTHON"); p && *p) candidates.push_back(p);
    candidates.push_back("/usr/bin/python3");
    if (const char * path = std::getenv("PATH")) {
        std::string dirs = path;
        size_t start = 0;
        while (start <= dirs.size()) {
            size_t end = dirs.find(':', start);
            if (end == std::string::npos) end = dirs.size();
            if (end > start) candidates.push_back(dirs.substr(start, end - start) + "/python3");
            start = end + 1;
        }
    }
    for (const auto & c : candidates) {
        if (!std::filesystem::exists(c)) continue;
        auto r = skippy::testing::run_command({c, "-c", "import jinja2"}, 30);
        if (r.exit_code == 0) return c;
    }
    return std::nullopt;
}

std::optional<std::vector<outcome>> run_oracle(const std::vector<jinja_case> & cases, std::string & why) {
    auto python = find_python_with_jinja2();
    if (!python) {
        why = "no python3 with jinja2 found";
        return std::nullopt;
    }
    nlohmann::ordered_json in = nlohmann::ordered_json::array();
    for (const auto & c : cases) {
        in.push_back({{"name", c.name}, {"template", c.source}, {"context", c.context},
                      {"trim_blocks", c.trim_blocks}, {"lstrip_blocks", c.lstrip_blocks}, {"now", c.now}});
    }
    std::string dir = skippy::testing::make_temp_dir("jinja_oracle");
    std::string in_path = dir + "/cases.json", out_path = dir + "/results.json";
    {
        std::ofstream f(in_path, std::ios::binary);
        f << in.dump();
    }
    auto r = skippy::testing::run_command({*python, test_dir() + "/jinja_oracle.py", in_path, out_path}, 120);
    if (r.exit_code != 0) {
        why = "oracle failed (exit " + std::to_string(r.exit_code) + "): " + r.err;
        return std::nullopt;
    }
    std::ifstream f(out_path, std::ios::binary);
    auto j = nlohmann::json::parse(f);
    std::vector<outcome> out;
    for (const auto & x : j) {
        outcome o;
        if (x.contains("output")) {
            o.ok = true;
            o.output = x["output"].get<std::string>();
        } else {
            o.error = x["error"].get<std::string>();
            o.message = x["message"].get<std::string>();
        }
        out.push_back(std::move(o));
    }
    std::filesystem::remove_all(dir);
    if (out.size() != cases.size()) {
        why = "oracle returned " + std::to_string(out.size()) + " results for " + std::to_string(cases.size()) + " cases";
        return std::nullopt;
    }
    return out;
}

namespace {

std::tm parse_now(const std::string & iso) {
    std::tm tm{};
    std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                &tm.tm_sec);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    std::time_t t = timegm(&tm);  // fills tm_wday and tm_yday
    std::tm norm{};
    gmtime_r(&t, &norm);
    return norm;
}

}  // namespace

outcome render_ours(const jinja_case & c) {
    outcome o;
    parse_options po;
    po.trim_blocks = c.trim_blocks;
    po.lstrip_blocks = c.lstrip_blocks;
    auto t = compiled_template::parse(c.source, po);
    if (!t.is_ok()) {
        o.error = "syntax";
        o.message = t.error().to_string();
        return o;
    }
    render_options ro;
    std::tm now = parse_now(c.now);
    ro.local_time = [now] { return now; };
    auto r = t->render(c.context, ro);
    if (r.is_ok()) {
        o.ok = true;
        o.output = *r;
    } else if (r.error().code() == error_code::invalid_argument) {
        o.error = "raise";
        o.message = r.error().message();
    } else {
        o.error = "render";
        o.message = r.error().to_string();
    }
    return o;
}

size_t expect_same(const std::vector<jinja_case> & cases, const std::vector<outcome> & theirs) {
    size_t same = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        outcome ours = render_ours(cases[i]);
        const outcome & ref = theirs[i];
        bool match = ours.ok == ref.ok && (ours.ok ? ours.output == ref.output
                                                   : ours.error == ref.error && (ref.error != "raise" || ours.message == ref.message));
        if (std::getenv("SKIPPY_JINJA_VERBOSE")) {
            std::printf("%s\n  jinja2: %s\n  ours:   %s\n", cases[i].name.c_str(),
                        (ref.ok ? "output " + nlohmann::json(ref.output).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : ref.error + ": " + ref.message).c_str(),
                        (ours.ok ? "output " + nlohmann::json(ours.output).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : ours.error + ": " + ours.message).c_str());
        }
        if (match) {
            ++same;
            continue;
        }
        ADD_FAILURE() << "case " << cases[i].name << "\n  template: " << cases[i].source.substr(0, 400)
                      << "\n  jinja2:  " << (ref.ok ? "output " + nlohmann::json(ref.output).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : ref.error + ": " + ref.message)
                      << "\n  ours:    " << (ours.ok ? "output " + nlohmann::json(ours.output).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : ours.error + ": " + ours.message);
    }
    return same;
}

}  // namespace skippy::jinja::testing
