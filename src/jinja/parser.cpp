#include "jinja/parser.h"

#include "jinja/builtins.h"
#include "jinja/py_text.h"

#include <algorithm>
#include <initializer_list>

namespace skippy::jinja::detail {

namespace {

// Tags jinja2 knows that our subset leaves out; a template using one fails to parse
// with a message naming it.
constexpr std::string_view k_unsupported_tags[] = {
    "block", "extends", "include", "import", "from", "call", "autoescape", "do", "trans",
    "pluralize", "endblock", "endcall",
};

bool is_keyword_const(std::string_view n) {
    return n == "true" || n == "false" || n == "True" || n == "False" || n == "none" || n == "None";
}

class parser {
public:
    parser(program & prog, std::vector<token> tokens, const parse_options & opts)
        : p_(prog), t_(std::move(tokens)), o_(opts) {}

    status run() {
        SKIPPY_TRY(subparse({}, p_.body));
        if (cur().kind != tok::eof) return fail(cur(), "unexpected " + describe(cur()));
        return status::ok();
    }

private:
    program &            p_;
    std::vector<token>   t_;
    const parse_options & o_;
    size_t               i_ = 0;
    int                  block_depth_ = 0;
    int                  loop_depth_ = 0;  // enclosing for loops, reset inside macros
    std::vector<std::string> tag_stack_;

    const token & cur() const { return t_[i_]; }
    const token & look(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    void next() { if (i_ + 1 < t_.size()) ++i_; }

    bool is_op(const token & t, std::string_view op) const { return t.kind == tok::op && t.text == op; }
    bool is_name(const token & t, std::string_view n) const { return t.kind == tok::name && t.text == n; }
    bool skip_op(std::string_view op) { if (is_op(cur(), op)) { next(); return true; } return false; }
    bool skip_name(std::string_view n) { if (is_name(cur(), n)) { next(); return true; } return false; }

    static std::string describe(const token & t) {
        switch (t.kind) {
            case tok::eof: return "end of template";
            case tok::data: return "template data";
            case tok::var_begin: return "'{{'";
            case tok::var_end: return "end of print statement";
            case tok::block_begin: return "'{%'";
            case tok::block_end: return "end of statement block";
            case tok::name: return "'" + t.text + "'";
            case tok::string: return "string literal";
            case tok::integer: return "integer";
            case tok::floating: return "float";
            case tok::op: return "'" + t.text + "'";
        }
        return "token";
    }

    status fail(const token & t, const std::string & msg) const { return fail_at(t.pos, msg); }
    status fail_at(uint32_t pos, const std::string & msg, error_code code = error_code::invalid_data) const {
        return make_error(code, p_.where(pos) + ": " + msg);
    }
    status unsupported(const token & t, const std::string & what) const {
        return fail_at(t.pos, what + " is not supported", error_code::unsupported);
    }

    status expect_op(std::string_view op) {
        if (skip_op(op)) return status::ok();
        return fail(cur(), "expected '" + std::string(op) + "', got " + describe(cur()));
    }
    status expect_kind(tok kind, std::string_view what) {
        if (cur().kind == kind) { next(); return status::ok(); }
        return fail(cur(), "expected " + std::string(what) + ", got " + describe(cur()));
    }
    result<std::string> expect_name() {
        if (cur().kind != tok::name) return fail(cur(), "expected a name, got " + describe(cur()));
        std::string n = cur().text;
        next();
        return n;
    }

    // --- nodes ---

    expr_ptr node(expr_kind kind, uint32_t pos) {
        auto e = std::make_unique<expr>();
        e->kind = kind;
        e->pos = pos;
        return e;
    }

    // Every node is checked once built: its depth (1 + its deepest child) must stay
    // within max_nesting, so that evaluating and freeing the tree recurse boundedly.
    status finish(expr & e) {
        int d = 0;
        auto see = [&](const expr_ptr & c) { if (c) d = std::max(d, c->depth); };
        see(e.a); see(e.b); see(e.c);
        for (auto & x : e.args) see(x);
        for (auto & [k, x] : e.kwargs) see(x);
        e.depth = d + 1;
        if (d + 1 > o_.lim.max_nesting) return fail_at(e.pos, "expression nested too deeply", error_code::unsupported);
        return status::ok();
    }

    // --- statements ---

    // Parses statements until a block tag whose name is in `end`; leaves the stream
    // at that name. With no `end` names, parses to the end of the template.
    status subparse(std::initializer_list<std::string_view> end, body_t & out) {
        if (++block_depth_ > o_.lim.max_nesting) {
            return fail_at(cur().pos, "blocks nested too deeply", error_code::unsupported);
        }
        while (true) {
            const token & t = cur();
            if (t.kind == tok::eof) {
                if (end.size() == 0) break;
                std::string names;
                for (auto n : end) names += (names.empty() ? "'" : " or '") + std::string(n) + "'";
                std::string open = tag_stack_.empty() ? "" : " to close '" + tag_stack_.back() + "'";
                return fail(t, "unexpected end of template, expected " + names + open);
            }
            if (t.kind == tok::data) {
                auto s = std::make_unique<stmt>();
                s->kind = stmt_kind::text;
                s->pos = t.pos;
                s->text = t.text;
                out.push_back(std::move(s));
                next();
            } else if (t.kind == tok::var_begin) {
                next();
                auto s = std::make_unique<stmt>();
                s->kind = stmt_kind::print;
                s->pos = t.pos;
                SKIPPY_ASSIGN_OR_RETURN(s->e, parse_tuple(true, {}, false));
                SKIPPY_TRY(expect_kind(tok::var_end, "end of print statement"));
                out.push_back(std::move(s));
            } else if (t.kind == tok::block_begin) {
                next();
                if (cur().kind == tok::name &&
                    std::find(end.begin(), end.end(), std::string_view(cur().text)) != end.end()) {
                    --block_depth_;
                    return status::ok();
                }
                SKIPPY_TRY(parse_statement(out));
                SKIPPY_TRY(expect_kind(tok::block_end, "end of statement block"));
            } else {
                return fail(t, "unexpected " + describe(t));
            }
        }
        --block_depth_;
        return status::ok();
    }

    // After a statement's header: the block end, then a body up to one of `end`.
    // Returns the end tag's name and consumes it.
    result<std::string> body_until(std::initializer_list<std::string_view> end, body_t & out) {
        skip_op(":");
        SKIPPY_TRY(expect_kind(tok::block_end, "end of statement block"));
        SKIPPY_TRY(subparse(end, out));
        std::string name = cur().text;
        next();
        return name;
    }

    status parse_statement(body_t & out) {
        const token & t = cur();
        if (t.kind != tok::name) return fail(t, "tag name expected");
        std::string tag = t.text;
        for (auto u : k_unsupported_tags)
            if (tag == u) return unsupported(t, "the '" + tag + "' tag");
        auto s = std::make_unique<stmt>();
        s->pos = t.pos;
        tag_stack_.push_back(tag);
        next();
        status st;
        if (tag == "for") st = parse_for(*s);
        else if (tag == "if") st = parse_if(*s);
        else if (tag == "set") st = parse_set(*s);
        else if (tag == "macro") st = parse_macro(*s);
        else if (tag == "filter") st = parse_filter_block(*s);
        else if (tag == "with") st = parse_with(*s);
        else if (tag == "print") {
            s->kind = stmt_kind::print;
            auto e = parse_tuple(true, {}, false);
            if (e.is_ok()) s->e = std::move(e).value(); else st = e.error();
        } else if (tag == "break" || tag == "continue") {
            s->kind = tag == "break" ? stmt_kind::break_ : stmt_kind::continue_;
            if (loop_depth_ == 0) st = fail(t, "'" + tag + "' outside of a loop");
        } else if (tag == "generation") {
            // transformers' AssistantTracker: renders its body (in a scope of its own).
            s->kind = stmt_kind::scoped;
            int saved = loop_depth_;
            loop_depth_ = 0;
            auto end = body_until({"endgeneration"}, s->body);
            loop_depth_ = saved;
            if (!end.is_ok()) st = end.error();
        } else {
            st = fail(t, "unknown tag '" + tag + "'");
        }
        tag_stack_.pop_back();
        SKIPPY_TRY(st);
        out.push_back(std::move(s));
        return status::ok();
    }

    status parse_for(stmt & s) {
        s.kind = stmt_kind::for_;
        SKIPPY_TRY(parse_assign_target(s.target, "in"));
        if (!skip_name("in")) return fail(cur(), "expected 'in', got " + describe(cur()));
        SKIPPY_ASSIGN_OR_RETURN(s.e, parse_tuple(false, "recursive", false));
        if (skip_name("if")) { SKIPPY_ASSIGN_OR_RETURN(s.cond, parse_expression(true)); }
        if (is_name(cur(), "recursive")) return unsupported(cur(), "a recursive for loop");
        ++loop_depth_;
        auto end = body_until({"endfor", "else"}, s.body);
        --loop_depth_;
        SKIPPY_TRY(end.error());
        if (*end == "else") {
            SKIPPY_ASSIGN_OR_RETURN(std::string e2, body_until({"endfor"}, s.else_body));
            (void)e2;
        }
        return status::ok();
    }

    status parse_if(stmt & s) {
        s.kind = stmt_kind::if_;
        while (true) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr c, parse_tuple(false, {}, false));
            body_t body;
            SKIPPY_ASSIGN_OR_RETURN(std::string end, body_until({"elif", "else", "endif"}, body));
            s.branches.emplace_back(std::move(c), std::move(body));
            if (end == "elif") continue;
            if (end == "else") {
                SKIPPY_ASSIGN_OR_RETURN(std::string e2, body_until({"endif"}, s.else_body));
                (void)e2;
            }
            return status::ok();
        }
    }

    status parse_set(stmt & s) {
        if (cur().kind == tok::name && is_op(look(), ".")) {
            s.target.names.push_back(cur().text);
            next();
            next();
            SKIPPY_ASSIGN_OR_RETURN(s.target.ns_attr, expect_name());
        } else {
            SKIPPY_TRY(parse_assign_target(s.target, {}));
        }
        if (skip_op("=")) {
            s.kind = stmt_kind::set;
            SKIPPY_ASSIGN_OR_RETURN(s.e, parse_tuple(true, {}, false));
            return status::ok();
        }
        s.kind = stmt_kind::set_block;
        if (is_op(cur(), "|")) { SKIPPY_ASSIGN_OR_RETURN(s.e, parse_filters(nullptr, false)); }
        SKIPPY_ASSIGN_OR_RETURN(std::string end, body_until({"endset"}, s.body));
        (void)end;
        return status::ok();
    }

    status parse_macro(stmt & s) {
        s.kind = stmt_kind::macro;
        SKIPPY_ASSIGN_OR_RETURN(s.text, expect_name());
        SKIPPY_TRY(expect_op("("));
        while (!is_op(cur(), ")")) {
            if (!s.params.empty()) SKIPPY_TRY(expect_op(","));
            if (is_op(cur(), ")")) break;
            const token & at = cur();
            SKIPPY_ASSIGN_OR_RETURN(std::string name, expect_name());
            if (is_keyword_const(name)) return fail(at, "can't assign to '" + name + "'");
            if (skip_op("=")) {
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr d, parse_expression(true));
                s.defaults.push_back(std::move(d));
            } else if (!s.defaults.empty()) {
                return fail(at, "non-default argument follows default argument");
            }
            s.params.push_back(std::move(name));
        }
        next();
        int saved = loop_depth_;
        loop_depth_ = 0;
        auto end = body_until({"endmacro"}, s.body);
        loop_depth_ = saved;
        SKIPPY_TRY(end.error());
        s.uses_varargs = body_names(s.body, "varargs");
        s.uses_kwargs = body_names(s.body, "kwargs");
        return status::ok();
    }

    status parse_filter_block(stmt & s) {
        s.kind = stmt_kind::filter_block;
        SKIPPY_ASSIGN_OR_RETURN(s.e, parse_filters(nullptr, true));
        SKIPPY_ASSIGN_OR_RETURN(std::string end, body_until({"endfilter"}, s.body));
        (void)end;
        return status::ok();
    }

    status parse_with(stmt & s) {
        s.kind = stmt_kind::with;
        while (cur().kind != tok::block_end) {
            if (!s.with_targets.empty()) SKIPPY_TRY(expect_op(","));
            assign_target target;
            SKIPPY_TRY(parse_assign_target(target, {}));
            SKIPPY_TRY(expect_op("="));
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr v, parse_expression(true));
            s.with_targets.push_back(std::move(target));
            s.with_values.push_back(std::move(v));
        }
        SKIPPY_ASSIGN_OR_RETURN(std::string end, body_until({"endwith"}, s.body));
        (void)end;
        return status::ok();
    }

    // A name, or names separated by commas (optionally in parentheses).
    status parse_assign_target(assign_target & target, std::string_view extra_end) {
        bool paren = skip_op("(");
        while (true) {
            const token & t = cur();
            if (t.kind != tok::name) {
                if (is_op(t, "(")) return unsupported(t, "a nested tuple as assignment target");
                return fail(t, "can't assign to " + describe(t));
            }
            if (is_keyword_const(t.text)) return fail(t, "can't assign to '" + t.text + "'");
            target.names.push_back(t.text);
            next();
            if (!is_op(cur(), ",")) break;
            target.tuple = true;
            next();
            if (paren && is_op(cur(), ")")) break;
            if (!extra_end.empty() && is_name(cur(), extra_end)) break;
            if (cur().kind == tok::block_end || is_op(cur(), "=")) break;
        }
        if (paren) SKIPPY_TRY(expect_op(")"));
        return status::ok();
    }

    // True when `name` is read anywhere in `body` (not counting nested macros).
    static bool expr_names(const expr * e, std::string_view name) {
        if (!e) return false;
        if (e->kind == expr_kind::name && e->name == name) return true;
        if (expr_names(e->a.get(), name) || expr_names(e->b.get(), name) || expr_names(e->c.get(), name)) return true;
        for (const auto & x : e->args) if (expr_names(x.get(), name)) return true;
        for (const auto & [k, x] : e->kwargs) if (expr_names(x.get(), name)) return true;
        return false;
    }
    static bool body_names(const body_t & body, std::string_view name) {
        for (const auto & s : body) {
            if (s->kind == stmt_kind::macro) continue;
            if (expr_names(s->e.get(), name) || expr_names(s->cond.get(), name)) return true;
            for (const auto & [c, b] : s->branches) if (expr_names(c.get(), name) || body_names(b, name)) return true;
            for (const auto & v : s->with_values) if (expr_names(v.get(), name)) return true;
            if (body_names(s->body, name) || body_names(s->else_body, name)) return true;
        }
        return false;
    }

    // --- expressions ---

    bool is_tuple_end(std::string_view extra_end) const {
        const token & t = cur();
        if (t.kind == tok::var_end || t.kind == tok::block_end || is_op(t, ")")) return true;
        return !extra_end.empty() && is_name(t, extra_end);
    }

    result<expr_ptr> parse_tuple(bool with_condexpr, std::string_view extra_end, bool explicit_parens) {
        uint32_t pos = cur().pos;
        std::vector<expr_ptr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) SKIPPY_TRY(expect_op(","));
            if (is_tuple_end(extra_end)) break;
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr e, parse_expression(with_condexpr));
            items.push_back(std::move(e));
            if (is_op(cur(), ",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) return fail(cur(), "expected an expression, got " + describe(cur()));
        }
        auto e = node(expr_kind::tuple, pos);
        e->args = std::move(items);
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<expr_ptr> parse_expression(bool with_condexpr) {
        if (with_condexpr) return parse_condexpr();
        return parse_or();
    }

    result<expr_ptr> parse_condexpr() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr e1, parse_or());
        while (skip_name("if")) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr e2, parse_or());
            expr_ptr e3;
            if (skip_name("else")) { SKIPPY_ASSIGN_OR_RETURN(e3, parse_condexpr()); }
            auto c = node(expr_kind::cond, pos);
            c->a = std::move(e1);
            c->b = std::move(e2);
            c->c = std::move(e3);
            SKIPPY_TRY(finish(*c));
            e1 = std::move(c);
        }
        return e1;
    }

    result<expr_ptr> binary(expr_kind kind, uint32_t pos, expr_ptr l, expr_ptr r) {
        auto e = node(kind, pos);
        e->a = std::move(l);
        e->b = std::move(r);
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<expr_ptr> parse_or() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr l, parse_and());
        while (skip_name("or")) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_and());
            SKIPPY_ASSIGN_OR_RETURN(l, binary(expr_kind::or_, pos, std::move(l), std::move(r)));
        }
        return l;
    }

    result<expr_ptr> parse_and() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr l, parse_not());
        while (skip_name("and")) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_not());
            SKIPPY_ASSIGN_OR_RETURN(l, binary(expr_kind::and_, pos, std::move(l), std::move(r)));
        }
        return l;
    }

    result<expr_ptr> parse_not() {
        if (is_name(cur(), "not")) {
            uint32_t pos = cur().pos;
            next();
            if (++guard_ > o_.lim.max_nesting) return fail_at(pos, "expression nested too deeply", error_code::unsupported);
            auto inner = parse_not();
            --guard_;
            SKIPPY_TRY(inner.error());
            auto e = node(expr_kind::not_, pos);
            e->a = std::move(inner).value();
            SKIPPY_TRY(finish(*e));
            return e;
        }
        return parse_compare();
    }
    int guard_ = 0;

    result<expr_ptr> parse_compare() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr first, parse_math1());
        auto cmp = node(expr_kind::compare, pos);
        while (true) {
            const token & t = cur();
            cmp_op op;
            if (t.kind == tok::op && t.text == "==") op = cmp_op::eq;
            else if (t.kind == tok::op && t.text == "!=") op = cmp_op::ne;
            else if (t.kind == tok::op && t.text == "<") op = cmp_op::lt;
            else if (t.kind == tok::op && t.text == "<=") op = cmp_op::le;
            else if (t.kind == tok::op && t.text == ">") op = cmp_op::gt;
            else if (t.kind == tok::op && t.text == ">=") op = cmp_op::ge;
            else if (is_name(t, "in")) op = cmp_op::in;
            else if (is_name(t, "not") && is_name(look(), "in")) { op = cmp_op::not_in; next(); }
            else break;
            next();
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_math1());
            if (cmp->args.empty()) cmp->args.push_back(std::move(first));
            cmp->cmp_ops.push_back(op);
            cmp->args.push_back(std::move(r));
        }
        if (cmp->args.empty()) return first;
        SKIPPY_TRY(finish(*cmp));
        return cmp;
    }

    result<expr_ptr> arith(bin_op op, uint32_t pos, expr_ptr l, expr_ptr r) {
        auto e = node(expr_kind::binary, pos);
        e->op = op;
        e->a = std::move(l);
        e->b = std::move(r);
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<expr_ptr> parse_math1() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr l, parse_concat());
        while (is_op(cur(), "+") || is_op(cur(), "-")) {
            bin_op op = cur().text == "+" ? bin_op::add : bin_op::sub;
            next();
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_concat());
            SKIPPY_ASSIGN_OR_RETURN(l, arith(op, pos, std::move(l), std::move(r)));
        }
        return l;
    }

    result<expr_ptr> parse_concat() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr first, parse_math2());
        if (!is_op(cur(), "~")) return first;
        auto e = node(expr_kind::concat, pos);
        e->args.push_back(std::move(first));
        while (skip_op("~")) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_math2());
            e->args.push_back(std::move(r));
        }
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<expr_ptr> parse_math2() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr l, parse_pow());
        while (true) {
            bin_op op;
            if (is_op(cur(), "*")) op = bin_op::mul;
            else if (is_op(cur(), "/")) op = bin_op::div;
            else if (is_op(cur(), "//")) op = bin_op::floordiv;
            else if (is_op(cur(), "%")) op = bin_op::mod;
            else break;
            next();
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_pow());
            SKIPPY_ASSIGN_OR_RETURN(l, arith(op, pos, std::move(l), std::move(r)));
        }
        return l;
    }

    result<expr_ptr> parse_pow() {
        uint32_t pos = cur().pos;
        SKIPPY_ASSIGN_OR_RETURN(expr_ptr l, parse_unary(true));
        while (skip_op("**")) {
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr r, parse_unary(true));
            SKIPPY_ASSIGN_OR_RETURN(l, arith(bin_op::pow, pos, std::move(l), std::move(r)));
        }
        return l;
    }

    result<expr_ptr> parse_unary(bool with_filter) {
        uint32_t pos = cur().pos;
        expr_ptr e;
        if (is_op(cur(), "-") || is_op(cur(), "+")) {
            expr_kind kind = cur().text == "-" ? expr_kind::neg : expr_kind::pos;
            next();
            if (++guard_ > o_.lim.max_nesting) return fail_at(pos, "expression nested too deeply", error_code::unsupported);
            auto inner = parse_unary(false);
            --guard_;
            SKIPPY_TRY(inner.error());
            e = node(kind, pos);
            e->a = std::move(inner).value();
            SKIPPY_TRY(finish(*e));
        } else {
            SKIPPY_ASSIGN_OR_RETURN(e, parse_primary());
        }
        SKIPPY_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
        if (with_filter) { SKIPPY_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e))); }
        return e;
    }

    result<expr_ptr> nested(bool with_condexpr) {
        if (++guard_ > o_.lim.max_nesting) return fail_at(cur().pos, "expression nested too deeply", error_code::unsupported);
        auto e = parse_expression(with_condexpr);
        --guard_;
        return e;
    }

    result<expr_ptr> parse_primary() {
        const token & t = cur();
        uint32_t pos = t.pos;
        if (t.kind == tok::name) {
            auto e = node(expr_kind::literal, pos);
            if (t.text == "true" || t.text == "True") e->lit = value::boolean(true);
            else if (t.text == "false" || t.text == "False") e->lit = value::boolean(false);
            else if (t.text == "none" || t.text == "None") e->lit = value::none();
            else { e->kind = expr_kind::name; e->name = t.text; }
            next();
            SKIPPY_TRY(finish(*e));
            return e;
        }
        if (t.kind == tok::string) {
            std::string s;
            while (cur().kind == tok::string) { s += cur().text; next(); }
            auto e = node(expr_kind::literal, pos);
            e->lit = value::string(std::move(s));
            SKIPPY_TRY(finish(*e));
            return e;
        }
        if (t.kind == tok::integer || t.kind == tok::floating) {
            auto e = node(expr_kind::literal, pos);
            e->lit = t.kind == tok::integer ? value::integer(t.ival) : value::floating(t.fval);
            next();
            SKIPPY_TRY(finish(*e));
            return e;
        }
        if (is_op(t, "(")) {
            next();
            if (++guard_ > o_.lim.max_nesting) return fail_at(pos, "expression nested too deeply", error_code::unsupported);
            auto e = parse_tuple(true, {}, true);
            --guard_;
            SKIPPY_TRY(e.error());
            SKIPPY_TRY(expect_op(")"));
            return std::move(e).value();
        }
        if (is_op(t, "[")) {
            next();
            auto e = node(expr_kind::list, pos);
            while (!is_op(cur(), "]")) {
                if (!e->args.empty()) SKIPPY_TRY(expect_op(","));
                if (is_op(cur(), "]")) break;
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr item, nested(true));
                e->args.push_back(std::move(item));
            }
            SKIPPY_TRY(expect_op("]"));
            SKIPPY_TRY(finish(*e));
            return e;
        }
        if (is_op(t, "{")) {
            next();
            auto e = node(expr_kind::dict, pos);
            while (!is_op(cur(), "}")) {
                if (!e->args.empty()) SKIPPY_TRY(expect_op(","));
                if (is_op(cur(), "}")) break;
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr k, nested(true));
                SKIPPY_TRY(expect_op(":"));
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr v, nested(true));
                e->args.push_back(std::move(k));
                e->args.push_back(std::move(v));
            }
            SKIPPY_TRY(expect_op("}"));
            SKIPPY_TRY(finish(*e));
            return e;
        }
        return fail(t, "unexpected " + describe(t));
    }

    result<expr_ptr> parse_postfix(expr_ptr e) {
        while (true) {
            if (is_op(cur(), ".") || is_op(cur(), "[")) {
                SKIPPY_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
            } else if (is_op(cur(), "(")) {
                SKIPPY_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
            } else {
                return e;
            }
        }
    }

    result<expr_ptr> parse_filter_expr(expr_ptr e) {
        while (true) {
            if (is_op(cur(), "|")) {
                SKIPPY_ASSIGN_OR_RETURN(e, parse_filters(std::move(e), false));
            } else if (is_name(cur(), "is")) {
                SKIPPY_ASSIGN_OR_RETURN(e, parse_test(std::move(e)));
            } else if (is_op(cur(), "(")) {
                SKIPPY_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
            } else {
                return e;
            }
        }
    }

    result<expr_ptr> parse_subscript(expr_ptr base) {
        const token & t = cur();
        uint32_t pos = t.pos;
        if (is_op(t, ".")) {
            next();
            const token & a = cur();
            if (a.kind == tok::name) {
                auto e = node(expr_kind::getattr, pos);
                e->a = std::move(base);
                e->name = a.text;
                next();
                SKIPPY_TRY(finish(*e));
                return e;
            }
            if (a.kind != tok::integer) return fail(a, "expected name or number");
            auto idx = node(expr_kind::literal, a.pos);
            idx->lit = value::integer(a.ival);
            next();
            SKIPPY_TRY(finish(*idx));
            auto e = node(expr_kind::getitem, pos);
            e->a = std::move(base);
            e->b = std::move(idx);
            SKIPPY_TRY(finish(*e));
            return e;
        }
        next();  // [
        std::vector<expr_ptr> args;
        while (!is_op(cur(), "]")) {
            if (!args.empty()) SKIPPY_TRY(expect_op(","));
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr a, parse_subscribed());
            args.push_back(std::move(a));
        }
        SKIPPY_TRY(expect_op("]"));
        auto e = node(expr_kind::getitem, pos);
        e->a = std::move(base);
        if (args.size() == 1) {
            e->b = std::move(args[0]);
        } else {
            auto tup = node(expr_kind::tuple, pos);
            tup->args = std::move(args);
            SKIPPY_TRY(finish(*tup));
            e->b = std::move(tup);
        }
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<expr_ptr> parse_subscribed() {
        uint32_t pos = cur().pos;
        expr_ptr start;
        if (!is_op(cur(), ":")) {
            SKIPPY_ASSIGN_OR_RETURN(start, nested(true));
            if (!is_op(cur(), ":")) return start;
        }
        next();  // first ':'
        auto e = node(expr_kind::slice, pos);
        e->a = std::move(start);
        if (!is_op(cur(), ":") && !is_op(cur(), "]") && !is_op(cur(), ",")) {
            SKIPPY_ASSIGN_OR_RETURN(e->b, nested(true));
        }
        if (skip_op(":")) {
            if (!is_op(cur(), "]") && !is_op(cur(), ",")) { SKIPPY_ASSIGN_OR_RETURN(e->c, nested(true)); }
        }
        SKIPPY_TRY(finish(*e));
        return e;
    }

    status parse_call_args(expr & e) {
        const token & open = cur();
        SKIPPY_TRY(expect_op("("));
        bool need_comma = false;
        while (!is_op(cur(), ")")) {
            if (need_comma) {
                SKIPPY_TRY(expect_op(","));
                if (is_op(cur(), ")")) break;
            }
            if (is_op(cur(), "*") || is_op(cur(), "**")) return unsupported(cur(), "'*args' / '**kwargs' in a call");
            if (cur().kind == tok::name && is_op(look(), "=")) {
                std::string key = cur().text;
                next();
                next();
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr v, nested(true));
                e.kwargs.emplace_back(std::move(key), std::move(v));
            } else {
                if (!e.kwargs.empty()) return fail(open, "invalid syntax for function call expression");
                SKIPPY_ASSIGN_OR_RETURN(expr_ptr v, nested(true));
                e.args.push_back(std::move(v));
            }
            need_comma = true;
        }
        next();
        return status::ok();
    }

    result<expr_ptr> parse_call(expr_ptr callee) {
        auto e = node(expr_kind::call, cur().pos);
        e->a = std::move(callee);
        SKIPPY_TRY(parse_call_args(*e));
        SKIPPY_TRY(finish(*e));
        return e;
    }

    result<std::string> dotted_name() {
        SKIPPY_ASSIGN_OR_RETURN(std::string name, expect_name());
        while (skip_op(".")) {
            SKIPPY_ASSIGN_OR_RETURN(std::string part, expect_name());
            name += "." + part;
        }
        return name;
    }

    // `| name(args)` repeated; `start_inline`: the first filter has no leading pipe.
    result<expr_ptr> parse_filters(expr_ptr base, bool start_inline) {
        while (is_op(cur(), "|") || start_inline) {
            if (!start_inline) next();
            start_inline = false;
            const token & t = cur();
            SKIPPY_ASSIGN_OR_RETURN(std::string name, dotted_name());
            int id = -1;
            name_status ns = find_filter(name, id);
            if (ns == name_status::unknown) return fail(t, "no filter named '" + name + "'");
            if (ns == name_status::unsupported) return unsupported(t, "the '" + name + "' filter");
            auto e = node(expr_kind::filter, t.pos);
            e->a = std::move(base);
            e->name = name;
            e->builtin = id;
            if (is_op(cur(), "(")) SKIPPY_TRY(parse_call_args(*e));
            SKIPPY_TRY(finish(*e));
            base = std::move(e);
        }
        return base;
    }

    result<expr_ptr> parse_test(expr_ptr base) {
        uint32_t pos = cur().pos;
        next();  // is
        bool negated = skip_name("not");
        const token & t = cur();
        SKIPPY_ASSIGN_OR_RETURN(std::string name, dotted_name());
        int id = -1;
        name_status ns = find_test(name, id);
        if (ns == name_status::unknown) return fail(t, "no test named '" + name + "'");
        if (ns == name_status::unsupported) return unsupported(t, "the '" + name + "' test");
        auto e = node(expr_kind::test, pos);
        e->a = std::move(base);
        e->name = name;
        e->builtin = id;
        e->negated = negated;
        const token & n = cur();
        if (is_op(n, "(")) {
            SKIPPY_TRY(parse_call_args(*e));
        } else if ((n.kind == tok::name || n.kind == tok::string || n.kind == tok::integer || n.kind == tok::floating ||
                    is_op(n, "[") || is_op(n, "{")) &&
                   !is_name(n, "else") && !is_name(n, "or") && !is_name(n, "and")) {
            if (is_name(n, "is")) return fail(n, "you cannot chain multiple tests with is");
            SKIPPY_ASSIGN_OR_RETURN(expr_ptr arg, parse_primary());
            SKIPPY_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
            e->args.push_back(std::move(arg));
        }
        SKIPPY_TRY(finish(*e));
        return e;
    }
};

// jinja2 compiles every frame (the template, a loop body, a macro, a with / filter /
// set / generation block) with variables of its own, resolved at compile time. For a
// name the frame assigns before it reads it (in statement order, outside any {% if %}),
// the variable starts as a copy of the enclosing frames' variable of that name when
// one of them mentions the name, and as undefined otherwise: until the assignment runs,
// the frame and the frames nested in it see it undefined, whatever the render context
// holds. Our scopes resolve names dynamically, which agrees with jinja2 everywhere else;
// these names (frame locals) are declared undefined when the frame starts. A nested
// frame's own statements are not mentions of its parent.
class frame_analysis {
public:
    // Fills program::body_locals and every stmt's body_locals / else_locals.
    static void annotate_program(program & prog) {
        frame_analysis root;
        root.visit(prog.body, false);
        prog.body_locals = root.stored_first_;
        annotate(prog.body, root.seen_);
    }

private:
    std::vector<std::string> seen_;          // names mentioned at this frame's level
    std::vector<std::string> stored_first_;  // ... of which assigned first, unconditionally

    static bool contains(const std::vector<std::string> & v, const std::string & n) {
        return std::find(v.begin(), v.end(), n) != v.end();
    }

    // The locals of a nested frame with `params`, enclosed by frames mentioning `outer`;
    // `mentions` gets what the nested frame's own nested frames see as enclosing.
    static std::vector<std::string> frame_locals(const body_t & body, std::vector<std::string> params,
                                                 const expr * cond, const std::vector<std::string> & outer,
                                                 std::vector<std::string> & mentions) {
        frame_analysis f;
        f.seen_ = std::move(params);
        f.loads(cond);
        f.visit(body, false);
        std::vector<std::string> locals;
        for (const auto & n : f.stored_first_)
            if (!contains(outer, n)) locals.push_back(n);
        mentions = outer;
        for (const auto & n : f.seen_)
            if (!contains(mentions, n)) mentions.push_back(n);
        return locals;
    }

    static void annotate(body_t & body, const std::vector<std::string> & outer) {
        for (auto & s : body) {
            for (auto & [c, b] : s->branches) annotate(b, outer);
            std::vector<std::string> params, mentions, else_mentions;
            const expr * cond = nullptr;
            switch (s->kind) {
                case stmt_kind::for_:
                    params = s->target.names;
                    params.push_back("loop");
                    cond = s->cond.get();
                    break;
                case stmt_kind::macro:
                    params = s->params;
                    params.push_back("varargs");
                    params.push_back("kwargs");
                    break;
                case stmt_kind::with:
                    for (const auto & t : s->with_targets) params.insert(params.end(), t.names.begin(), t.names.end());
                    break;
                case stmt_kind::set_block:
                case stmt_kind::filter_block:
                case stmt_kind::scoped:
                    break;
                default:
                    annotate(s->else_body, outer);
                    continue;
            }
            s->body_locals = frame_locals(s->body, params, cond, outer, mentions);
            s->else_locals = frame_locals(s->else_body, {}, nullptr, outer, else_mentions);
            annotate(s->body, mentions);
            annotate(s->else_body, else_mentions);
        }
    }

    void load(const std::string & n) { if (!contains(seen_, n)) seen_.push_back(n); }
    void store(const std::string & n, bool in_if) {
        if (contains(seen_, n)) return;
        seen_.push_back(n);
        if (!in_if) stored_first_.push_back(n);
    }
    void loads(const expr * e) {
        if (!e) return;
        if (e->kind == expr_kind::name) load(e->name);
        loads(e->a.get());
        loads(e->b.get());
        loads(e->c.get());
        for (const auto & x : e->args) loads(x.get());
        for (const auto & [k, x] : e->kwargs) loads(x.get());
    }
    void target(const assign_target & t, bool in_if) {
        if (!t.ns_attr.empty()) { load(t.names[0]); return; }
        for (const auto & n : t.names) store(n, in_if);
    }
    void visit(const body_t & body, bool in_if) {
        for (const auto & s : body) {
            switch (s->kind) {
                case stmt_kind::print: loads(s->e.get()); break;
                case stmt_kind::if_:
                    for (const auto & [c, b] : s->branches) {
                        loads(c.get());
                        visit(b, true);
                    }
                    visit(s->else_body, true);
                    break;
                case stmt_kind::for_: loads(s->e.get()); break;
                case stmt_kind::set:
                    loads(s->e.get());
                    target(s->target, in_if);
                    break;
                case stmt_kind::set_block: target(s->target, in_if); break;
                case stmt_kind::macro: store(s->text, in_if); break;
                case stmt_kind::filter_block: loads(s->e.get()); break;
                case stmt_kind::with:
                    for (const auto & v : s->with_values) loads(v.get());
                    break;
                default: break;
            }
        }
    }
};

}  // namespace

status parse_program(program & prog, std::vector<token> tokens, const parse_options & opts) {
    parser p(prog, std::move(tokens), opts);
    SKIPPY_TRY(p.run());
    frame_analysis::annotate_program(prog);
    return status::ok();
}

}  // namespace skippy::jinja::detail
