// Checks on a parsed grammar and its layout for the matcher: every rule defined, a
// root, alternatives that can never match dropped, no left recursion.
#include "grammar/grammar.h"
#include "grammar/grammar_data.h"
#include "grammar/parsed_grammar.h"

#include <algorithm>

namespace skippy::grammar {

namespace detail {

bool char_class::contains(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1u;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                               [](uint32_t v, const std::pair<uint32_t, uint32_t> & r) { return v < r.first; });
    if (it == ranges.begin()) return false;
    --it;
    return cp <= it->second;
}

bool char_class::intersects(uint32_t lo, uint32_t hi) const {
    // The first range ending at or after lo.
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t> & r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= hi;
}

bool char_class::covers(uint32_t lo, uint32_t hi) const {
    // Ranges are merged, so [lo, hi] is covered only by the one range that holds lo.
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const std::pair<uint32_t, uint32_t> & r, uint32_t v) { return r.second < v; });
    return it != ranges.end() && it->first <= lo && hi <= it->second;
}

char_class make_char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    // Sized up front: this runs for every class a grammar names, and each growth step is
    // an allocation (costly under ASan, where the grammar fuzzers spend their time).
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    merged.reserve(ranges.size());
    for (auto [lo, hi] : ranges) {
        hi = std::min(hi, max_code_point);
        if (lo > hi) continue;
        if (!merged.empty() && lo <= merged.back().second + 1) {
            merged.back().second = std::max(merged.back().second, hi);
        } else {
            merged.emplace_back(lo, hi);
        }
    }
    if (negated) {
        std::vector<std::pair<uint32_t, uint32_t>> inverse;
        inverse.reserve(merged.size() + 1);
        uint32_t next = 0;
        for (auto [lo, hi] : merged) {
            if (lo > next) inverse.emplace_back(next, lo - 1);
            next = hi + 1;
        }
        if (next <= max_code_point) inverse.emplace_back(next, max_code_point);
        merged = std::move(inverse);
    }
    char_class out;
    out.ranges.reserve(merged.size() + 1);  // the surrogate cut splits at most one range
    for (auto [lo, hi] : merged) {
        // Cut out the surrogates.
        if (hi < 0xD800 || lo > 0xDFFF) {
            out.ranges.emplace_back(lo, hi);
        } else {
            if (lo < 0xD800) out.ranges.emplace_back(lo, 0xD7FF);
            if (hi > 0xDFFF) out.ranges.emplace_back(0xE000, hi);
        }
    }
    for (auto [lo, hi] : out.ranges) {
        for (uint32_t c = lo; c <= hi && c < 128; ++c) out.ascii[c >> 6] |= uint64_t{1} << (c & 63);
    }
    return out;
}

namespace {

// Marks the rules that derive some string (productive) or the empty string (nullable),
// in time linear in the grammar: an alternative waits on a count of pending symbols,
// and a rule that turns true releases the alternatives that mention it.
std::vector<bool> rules_where(const parsed_grammar & g, bool nullable) {
    const size_t n_rules = g.rules.size();
    std::vector<bool> done(n_rules, false);
    // Flat arrays rather than a vector per rule: compile() runs for every request with a
    // schema, and these were most of its allocations.
    // pending[alt_begin[r] + a]: symbols of rule r's alternative a not yet true.
    std::vector<uint32_t> alt_begin(n_rules + 1, 0);
    for (uint32_t r = 0; r < n_rules; ++r) alt_begin[r + 1] = alt_begin[r] + uint32_t(g.rules[r].alts.size());
    std::vector<uint32_t> pending(alt_begin[n_rules], 0);
    // users[user_begin[s], user_begin[s + 1]): the alternatives (as pending indices) that
    // mention rule s, once per mention.
    std::vector<uint32_t> user_begin(n_rules + 1, 0);
    for (const auto & rule : g.rules) {
        for (const auto & alt : rule.alts) {
            for (const symbol & s : alt) {
                if (s.kind == symbol_kind::rule) ++user_begin[s.index + 1];
            }
        }
    }
    for (size_t r = 0; r < n_rules; ++r) user_begin[r + 1] += user_begin[r];
    std::vector<uint32_t> users(user_begin[n_rules]);
    std::vector<uint32_t> user_fill(user_begin.begin(), user_begin.end() - 1);
    std::vector<uint32_t> alt_rule(alt_begin[n_rules]);  // the rule of each alternative
    std::vector<uint32_t> queue;
    auto make_true = [&](uint32_t r) {
        if (!done[r]) { done[r] = true; queue.push_back(r); }
    };
    for (uint32_t r = 0; r < n_rules; ++r) {
        const auto & alts = g.rules[r].alts;
        for (uint32_t a = 0; a < alts.size(); ++a) {
            const uint32_t alt_index = alt_begin[r] + a;
            alt_rule[alt_index] = r;
            bool impossible = false;
            for (const symbol & s : alts[a]) {
                if (s.kind == symbol_kind::chars) {
                    // A character is never empty; a class is productive unless empty.
                    if (nullable || g.classes[s.index].ranges.empty()) impossible = true;
                } else if (s.kind == symbol_kind::rule) {
                    ++pending[alt_index];
                    users[user_fill[s.index]++] = alt_index;
                }
            }
            if (impossible) pending[alt_index] = UINT32_MAX;
            else if (pending[alt_index] == 0) make_true(r);
        }
    }
    while (!queue.empty()) {
        uint32_t r = queue.back();
        queue.pop_back();
        for (uint32_t u = user_begin[r]; u < user_begin[r + 1]; ++u) {
            uint32_t & p = pending[users[u]];
            if (p == UINT32_MAX || p == 0) continue;
            if (--p == 0) make_true(alt_rule[users[u]]);
        }
    }
    return done;
}

std::string rule_label(const parsed_grammar & g, uint32_t r, std::string_view source) {
    const parsed_rule & rule = g.rules[r];
    if (!rule.synthesized) return "'" + rule.name + "'";
    return "'" + rule.name + "' (group or repetition at " + source_position(source, rule.offset) + ")";
}

// The left-recursion check: an edge r → s when s can start r's match without any
// character before it. A cycle means the matcher could expand forever.
status check_left_recursion(const parsed_grammar & g, const std::vector<bool> & nullable, std::string_view source) {
    const size_t n_rules = g.rules.size();
    std::vector<std::vector<uint32_t>> edges(n_rules);
    for (uint32_t r = 0; r < n_rules; ++r) {
        for (const auto & alt : g.rules[r].alts) {
            for (const symbol & s : alt) {
                if (s.kind != symbol_kind::rule) break;
                edges[r].push_back(s.index);
                if (!nullable[s.index]) break;
            }
        }
    }
    // Iterative depth-first search; colour 1 = on the path, 2 = finished.
    std::vector<uint8_t> colour(n_rules, 0);
    struct frame { uint32_t rule; size_t next; };
    std::vector<frame> path;
    for (uint32_t start = 0; start < n_rules; ++start) {
        if (colour[start]) continue;
        path.push_back({start, 0});
        colour[start] = 1;
        while (!path.empty()) {
            frame & f = path.back();
            if (f.next == edges[f.rule].size()) {
                colour[f.rule] = 2;
                path.pop_back();
                continue;
            }
            uint32_t s = edges[f.rule][f.next++];
            if (colour[s] == 1) {
                std::string cycle;
                size_t i = 0;
                while (path[i].rule != s) ++i;
                for (; i < path.size(); ++i) cycle += rule_label(g, path[i].rule, source) + " -> ";
                cycle += "'" + g.rules[s].name + "'";
                return make_error(error_code::invalid_argument,
                                  "gbnf " + source_position(source, g.rules[s].offset) +
                                      ": left recursion (a rule reaches itself before any character): " + cycle);
            }
            if (colour[s] == 0) {
                colour[s] = 1;
                path.push_back({s, 0});
            }
        }
    }
    return status::ok();
}

}  // namespace

result<std::unique_ptr<grammar_data>> finish_grammar(parsed_grammar g, std::string_view source) {
    uint32_t root = UINT32_MAX;
    for (uint32_t r = 0; r < g.rules.size(); ++r) {
        const parsed_rule & rule = g.rules[r];
        if (!rule.defined) {
            return make_error(error_code::invalid_argument, "gbnf " + source_position(source, rule.offset) +
                                                                ": rule '" + rule.name + "' is never defined");
        }
        if (!rule.synthesized && rule.name == "root") root = r;
    }
    if (root == UINT32_MAX) return make_error(error_code::invalid_argument, "gbnf: grammar has no 'root' rule");

    // Alternatives that mention a rule deriving nothing can never match: drop them, so
    // every stack the matcher keeps can still be completed.
    std::vector<bool> productive = rules_where(g, false);
    if (!productive[root]) {
        return make_error(error_code::invalid_argument, "gbnf: rule 'root' matches no string");
    }
    for (auto & rule : g.rules) {
        std::erase_if(rule.alts, [&](const std::vector<symbol> & alt) {
            return std::any_of(alt.begin(), alt.end(), [&](const symbol & s) {
                return (s.kind == symbol_kind::rule && !productive[s.index]) ||
                       (s.kind == symbol_kind::chars && g.classes[s.index].ranges.empty());
            });
        });
    }
    std::vector<bool> nullable = rules_where(g, true);
    SKIPPY_TRY(check_left_recursion(g, nullable, source));

    auto out = std::make_unique<grammar_data>();
    out->root = root;
    out->classes = std::move(g.classes);
    out->rule_alt_begin.reserve(g.rules.size() + 1);
    out->rule_names.reserve(g.rules.size());
    size_t n_alts = 0, n_symbols = 0;
    for (const auto & rule : g.rules) {
        n_alts += rule.alts.size();
        for (const auto & alt : rule.alts) n_symbols += alt.size() + 1;
    }
    out->alt_starts.reserve(n_alts);
    out->symbols.reserve(n_symbols);
    for (auto & rule : g.rules) {
        out->rule_alt_begin.push_back(uint32_t(out->alt_starts.size()));
        for (auto & alt : rule.alts) {
            out->alt_starts.push_back(uint32_t(out->symbols.size()));
            out->symbols.insert(out->symbols.end(), alt.begin(), alt.end());
            out->symbols.push_back({symbol_kind::end, 0});
        }
        out->rule_names.push_back(std::move(rule.name));
    }
    out->rule_alt_begin.push_back(uint32_t(out->alt_starts.size()));
    return out;
}

}  // namespace detail

compiled_grammar::compiled_grammar(std::unique_ptr<detail::grammar_data> data) : data_(std::move(data)) {}
compiled_grammar::~compiled_grammar() = default;

size_t compiled_grammar::n_rules() const { return data_->rule_names.size(); }
size_t compiled_grammar::n_symbols() const { return data_->symbols.size(); }

result<grammar_ptr> compile(std::string_view gbnf, const grammar_limits & limits) {
    SKIPPY_ASSIGN_OR_RETURN(detail::parsed_grammar parsed, detail::parse_gbnf(gbnf, limits));
    SKIPPY_ASSIGN_OR_RETURN(std::unique_ptr<detail::grammar_data> data, detail::finish_grammar(std::move(parsed), gbnf));
    return grammar_ptr(std::make_shared<compiled_grammar>(std::move(data)));
}

}  // namespace skippy::grammar
