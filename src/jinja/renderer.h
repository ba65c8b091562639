// The tree-walking renderer (internal to the jinja part).
//
// One renderer renders one template once. Names resolve through a chain of scopes the
// way jinja2's generated code resolves them: the template, a for-loop iteration, a
// macro call and the bodies of {% with %}, {% set %}...{% endset %}, {% filter %} and
// {% generation %} each get a scope of their own (a frame), whose parent is the
// enclosing scope (for a macro: the scope it was defined in); {% if %} bodies do not.
// A frame starts with its first-assigned names undefined (stmt::body_locals). Every
// step is charged against render limits.
#pragma once

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/builtins.h"
#include "jinja/jinja.h"
#include "jinja/value.h"

#include <nlohmann/json_fwd.hpp>

#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace skippy::jinja::detail {

struct scope {
    std::shared_ptr<scope>                      parent;
    std::vector<std::pair<std::string, value>>  vars;

    value * find_local(std::string_view name);
    void set(const std::string & name, value v);
};
using scope_ptr = std::shared_ptr<scope>;

class renderer {
public:
    renderer(const program & prog, const render_options & opts);
    ~renderer();
    renderer(const renderer &) = delete;
    renderer & operator=(const renderer &) = delete;

    // REQUIRES: context is a JSON object.
    result<std::string> run(const nlohmann::ordered_json & context);

    // --- services for the builtins ---
    const limits & lim() const { return opts_.lim; }
    status charge(uint64_t units);
    status check_string(size_t n_bytes) const;  // any string built must fit max_output_bytes
    status check_items(size_t n_items) const;   // any list or dict built must fit max_items
    result<value> getattr(const value & obj, std::string_view name);
    result<value> getitem(const value & obj, const value & key);
    result<std::vector<value>> iterate(const value & v);
    result<value> call(const value & callee, const call_args & a);
    std::shared_ptr<namespace_data> new_namespace();
    std::tm local_time() const;
    result<std::string> str(const value & v);  // Python str(), within the limits

private:
    result<value> eval(const expr & e, const scope_ptr & sc);
    result<value> eval_inner(const expr & e, const scope_ptr & sc);
    status eval_args(const expr & e, const scope_ptr & sc, call_args & out);
    result<value> eval_getitem(const expr & e, const scope_ptr & sc);
    result<bool> contains(const value & container, const value & item);
    result<value> call_global(int id, const call_args & a);
    result<value> call_macro(const callable_data & m, const call_args & a);

    status exec(const body_t & body, const scope_ptr & sc, std::string & out);
    status exec_one(const stmt & s, const scope_ptr & sc, std::string & out);
    status exec_for(const stmt & s, const scope_ptr & sc, std::string & out);
    status assign(const assign_target & t, value v, const scope_ptr & sc, uint32_t pos);
    status bind(const assign_target & t, value v, const scope_ptr & sc, uint32_t pos);
    status append(std::string & out, std::string_view text);

    value lookup(const std::string & name, const scope_ptr & sc);
    // A frame's scope: child of `parent`, with the frame's first-assigned names undefined.
    scope_ptr frame(const scope_ptr & parent, const std::vector<std::string> & locals);
    // A helper's error, positioned at e; errors from evaluating children pass unchanged.
    status at(uint32_t pos, status st) const;
    template <typename T> result<T> at(uint32_t pos, result<T> r) const {
        if (r.is_ok()) return r;
        return at(pos, r.error());
    }

    enum class jump { none, break_, continue_ };

    const program &                               prog_;
    const render_options &                        opts_;
    uint64_t                                      work_ = 0;
    uint64_t                                      iterations_ = 0;
    int                                           depth_ = 0;
    int                                           call_depth_ = 0;
    jump                                          jump_ = jump::none;
    mutable bool                                  positioned_ = false;  // the error on its way up has its position
    value                                         placeholder_;  // input of a block's filter chain
    std::vector<std::shared_ptr<namespace_data>>  namespaces_;   // cleared at the end: they may hold themselves
};

}  // namespace skippy::jinja::detail
