// simt/op_count_plugin.cpp: a GCC plugin that makes the code it compiles count its own
// arithmetic, so the SIMT emulator can tell how much work each emulated kernel did (the
// per-kernel cost model). The counters are the globals of simt/op_counts.h.
//
// How it works. GCC turns each function into GIMPLE: basic blocks of three-address statements
// ("_3 = _1 * _2;", "_5 = expf (_4);"). A basic block runs start to end or not at all, so its
// counts can be summed here, at compile time, and added once each time it runs: the plugin puts
// at the start of every block (after its labels) the increments
//     simt_fp32_ops += <the block's float ops>;  simt_statements += <its statements>;  ...
// each a load, an add of a constant and a store of a plain 64-bit global (the emulator runs
// every CUDA thread on one OS thread, so nothing needs to be atomic). A block with nothing to
// count gets nothing.
//
// Where it runs: right after the pass named "optimized", the last GIMPLE pass that changes
// code, which runs at every optimization level (-O0 too), just before RTL expansion. By then
// the loop optimizations, the vectorizers, if-conversion, FMA formation (widening_mul), sqrt's
// errno split (cdce), the sin+cos merge (sincos) and the lowering of vectors the target lacks
// have all run, so what is counted is the code that becomes machine code. Running earlier would
// also change that code: a store to a global inside a loop keeps the vectorizer from
// vectorizing it. The increments touch nothing the program computes, so its results are
// unchanged.
//
// Why per lane: a vectorized loop does the work of 8 float iterations in one statement on
// vector(8) float. The cost model wants the arithmetic, which does not depend on how the host
// compiler packed it, so a statement on a vector counts once per lane, for the ops and for
// simt_statements alike.
#include "gcc-plugin.h"
#include "plugin-version.h"
#include "tree.h"
#include "tree-pass.h"
#include "context.h"
#include "function.h"
#include "basic-block.h"
#include "gimple.h"
#include "gimple-iterator.h"
#include "ssa.h"
#include "tree-dfa.h"
#include "tree-into-ssa.h"
#include "cgraph.h"
#include "diagnostic-core.h"

int plugin_is_GPL_compatible;

namespace {

struct BlockCounts {
  unsigned HOST_WIDE_INT fp32 = 0, fp64 = 0, special = 0, statements = 0;
};

unsigned lanes_of(tree type) {
  return VECTOR_TYPE_P(type) ? constant_lower_bound(TYPE_VECTOR_SUBPARTS(type)) : 1;
}

// `ops_per_lane` arithmetic operations whose result has `type`, counted only when its
// elements are float (fp32) or double (fp64).
void add_float_ops(BlockCounts& counts, tree type, unsigned ops_per_lane) {
  tree element = VECTOR_TYPE_P(type) ? TREE_TYPE(type) : type;
  if (!SCALAR_FLOAT_TYPE_P(element)) return;
  if (TYPE_MODE(element) == SFmode) counts.fp32 += ops_per_lane * lanes_of(type);
  if (TYPE_MODE(element) == DFmode) counts.fp64 += ops_per_lane * lanes_of(type);
}

// The type a statement works on: its result's, or for a statement without one (a call whose
// value is unused, a masked store) its widest vector operand's, so vector work still counts
// per lane.
tree working_type(gimple* stmt) {
  if (tree lhs = gimple_get_lhs(stmt)) return TREE_TYPE(lhs);
  tree widest = void_type_node;
  for (unsigned i = 0; i < gimple_num_ops(stmt); ++i) {
    tree op = gimple_op(stmt, i);
    if (op && TREE_TYPE(op) && lanes_of(TREE_TYPE(op)) > lanes_of(widest)) widest = TREE_TYPE(op);
  }
  return widest;
}

// The float and double builtins of a math function; with MATH_FN also its internal function
// (.SQRT, .EXP, ...), the form GCC gives a call it may expand inline or vectorize.
#define MATH_BUILTINS(NAME) case CFN_BUILT_IN_##NAME##F: case CFN_BUILT_IN_##NAME:
#define MATH_FN(NAME) MATH_BUILTINS(NAME) case CFN_##NAME:

// How many special-function evaluations a call is: what a GPU sends to its special-function
// unit or runs as an instruction sequence.
unsigned special_ops_of(combined_fn fn) {
  switch (fn) {
    MATH_FN(EXP) MATH_FN(EXP2) MATH_FN(EXPM1) MATH_FN(LOG) MATH_FN(LOG2) MATH_FN(LOG10)
    MATH_FN(LOG1P) MATH_FN(SQRT) MATH_FN(SIN) MATH_FN(COS) MATH_FN(TAN) MATH_FN(TANH)
    MATH_FN(POW) MATH_BUILTINS(ERF) MATH_BUILTINS(ERFC)
      return 1;
    MATH_BUILTINS(CEXPI)  // the sincos pass merges sin(x) and cos(x) of one x into it
      return 2;
    default:
      return 0;
  }
}

bool is_fused_multiply_add(combined_fn fn) {
  switch (fn) {
    MATH_FN(FMA) case CFN_FMS: case CFN_FNMA: case CFN_FNMS:
      return true;
    default:
      return false;
  }
}

#undef MATH_FN
#undef MATH_BUILTINS

// Statements that emit no machine code: labels, debug binds, nops and clobbers (the end of a
// variable's lifetime).
bool emits_code(gimple* stmt) {
  return gimple_code(stmt) != GIMPLE_LABEL && gimple_code(stmt) != GIMPLE_NOP && !is_gimple_debug(stmt) &&
         !gimple_clobber_p(stmt);
}

bool is_sanitizer_call(gimple* stmt) {
  tree callee = is_gimple_call(stmt) ? gimple_call_fndecl(stmt) : NULL_TREE;
  if (!callee || !fndecl_built_in_p(callee, BUILT_IN_NORMAL)) return false;
  const char* name = IDENTIFIER_POINTER(DECL_NAME(callee));
  for (const char* prefix : {"__builtin___asan_", "__builtin___hwasan_", "__builtin___tsan_", "__builtin___ubsan_",
                             "__builtin___sanitizer_"})
    if (strncmp(name, prefix, strlen(prefix)) == 0) return true;
  return false;
}

// A value computed only for statements already in `added` (an address converted for a
// sanitizer's check).
bool only_feeds(gimple* stmt, hash_set<gimple*>& added) {
  tree value = is_gimple_assign(stmt) ? gimple_assign_lhs(stmt) : NULL_TREE;
  if (!value || TREE_CODE(value) != SSA_NAME || has_zero_uses(value) || gimple_has_side_effects(stmt)) return false;
  imm_use_iterator uses;
  use_operand_p use;
  FOR_EACH_IMM_USE_FAST(use, uses, value) {
    if (!is_gimple_debug(USE_STMT(use)) && !added.contains(USE_STMT(use))) return false;
  }
  return true;
}

// What the sanitizers added to the block (the emulator's memory watch compiles the kernels
// with -fsanitize=kernel-address, whose checks are in the code by this pass): their calls and
// the addresses converted for them alone. They are the emulator's work, not the kernel's, so
// they are not counted. (The watch still changes the kernel's code, and so its statements: its
// checks keep GCC from vectorizing. The float and special counts are the same either way.)
// Backwards, so that a statement's uses in the block are judged before it.
void find_sanitizer_statements(basic_block block, hash_set<gimple*>* added) {
  for (gimple_stmt_iterator gsi = gsi_last_bb(block); !gsi_end_p(gsi); gsi_prev(&gsi)) {
    if (is_sanitizer_call(gsi_stmt(gsi)) || only_feeds(gsi_stmt(gsi), *added)) added->add(gsi_stmt(gsi));
  }
}

// Whether `ref` is an element of one of the function's own variables at a position known at
// compile time (a fragment's s[2][1] once the loops are unrolled): what nvcc keeps in a
// register. A variable position (s[i] in a loop not unrolled) is local memory on a GPU, and so
// is not one.
bool is_register_slot(tree ref) {
  if (TREE_CODE(ref) == SSA_NAME || CONSTANT_CLASS_P(ref)) return false;
  poly_int64 offset;
  tree base = get_addr_base_and_unit_offset(ref, &offset);  // NULL_TREE: a variable offset
  if (!base) return false;
  if (TREE_CODE(base) == MEM_REF) {
    tree address = TREE_OPERAND(base, 0);
    if (TREE_CODE(address) != ADDR_EXPR) return false;
    base = TREE_OPERAND(address, 0);
  }
  return VAR_P(base) && auto_var_in_fn_p(base, current_function_decl);
}

// A copy between a register value and a register slot: the emulator's host code keeps a
// fragment in memory (its address goes to the instruction's C++ model), but on a GPU the
// load or store is no instruction at all. (One side of a scalar copy is always a register
// value in GIMPLE, so the other side's memory is the slot.)
bool is_register_move(gimple* stmt) {
  if (!gimple_assign_single_p(stmt)) return false;
  tree lhs = gimple_assign_lhs(stmt), rhs = gimple_assign_rhs1(stmt);
  if (!is_gimple_reg_type(TREE_TYPE(lhs))) return false;
  return is_register_slot(lhs) || is_register_slot(rhs);
}

BlockCounts count_block(basic_block block) {
  BlockCounts counts;
  hash_set<gimple*> sanitizer_statements;
  find_sanitizer_statements(block, &sanitizer_statements);
  for (gimple_stmt_iterator gsi = gsi_start_bb(block); !gsi_end_p(gsi); gsi_next(&gsi)) {
    gimple* stmt = gsi_stmt(gsi);
    if (!emits_code(stmt) || sanitizer_statements.contains(stmt) || is_register_move(stmt)) continue;
    tree type = working_type(stmt);
    counts.statements += lanes_of(type);
    if (is_gimple_assign(stmt)) {
      switch (gimple_assign_rhs_code(stmt)) {
        case PLUS_EXPR: case MINUS_EXPR: case MULT_EXPR: case RDIV_EXPR:
          add_float_ops(counts, type, 1);
          break;
        default:
          break;
      }
    } else if (is_gimple_call(stmt)) {
      combined_fn fn = gimple_call_combined_fn(stmt);
      if (is_fused_multiply_add(fn)) add_float_ops(counts, type, 2);
      counts.special += special_ops_of(fn) * lanes_of(type);
    }
  }
  return counts;
}

// The counter's declaration: the translation unit's own when it uses or defines the counter
// (simt/op_counts.h), else a new `extern` one of the same symbol.
tree counter_decl(const char* name) {
  tree symbol = get_identifier(name);
  if (symtab_node* existing = symtab_node::get_for_asmname(symbol)) return existing->decl;
  tree decl = build_decl(UNKNOWN_LOCATION, VAR_DECL, symbol, uint64_type_node);
  TREE_PUBLIC(decl) = 1;
  DECL_EXTERNAL(decl) = 1;
  SET_DECL_ASSEMBLER_NAME(decl, symbol);  // an extern "C" name: no C++ mangling
  varpool_node::get_create(decl);         // known to the symbol table, as a use of it would be
  return decl;
}

void append_increment(gimple_seq* seq, const char* counter_name, unsigned HOST_WIDE_INT amount,
                      location_t location) {
  if (amount == 0) return;
  tree counter = counter_decl(counter_name);
  tree type = TREE_TYPE(counter);
  tree before = make_ssa_name(type);
  tree after = make_ssa_name(type);
  gimple* steps[] = {gimple_build_assign(before, counter),
                     gimple_build_assign(after, PLUS_EXPR, before, build_int_cstu(type, amount)),
                     gimple_build_assign(counter, after)};
  for (gimple* step : steps) {
    gimple_set_location(step, location);
    gimple_seq_add_stmt(seq, step);
  }
}

const pass_data op_count_pass_data = {
    GIMPLE_PASS, "simt_op_count", OPTGROUP_NONE, TV_NONE, PROP_cfg | PROP_ssa, 0, 0, 0, 0,
};

class OpCountPass : public gimple_opt_pass {
 public:
  explicit OpCountPass(gcc::context* context) : gimple_opt_pass(op_count_pass_data, context) {}

  unsigned int execute(function* fun) final override {
    bool inserted = false;
    basic_block block;
    FOR_EACH_BB_FN(block, fun) {
      BlockCounts counts = count_block(block);
      gimple_stmt_iterator where = gsi_after_labels(block);
      // A returns_twice call (setjmp) must stay first in its block, and it also ends it: such
      // a block has no room for an increment, and its one statement goes uncounted.
      if (!gsi_end_p(where) && is_gimple_call(gsi_stmt(where)) &&
          (gimple_call_flags(gsi_stmt(where)) & ECF_RETURNS_TWICE))
        continue;
      location_t location = gsi_end_p(where) ? UNKNOWN_LOCATION : gimple_location(gsi_stmt(where));
      gimple_seq increments = nullptr;
      append_increment(&increments, "simt_fp32_ops", counts.fp32, location);
      append_increment(&increments, "simt_fp64_ops", counts.fp64, location);
      append_increment(&increments, "simt_special_ops", counts.special, location);
      append_increment(&increments, "simt_statements", counts.statements, location);
      if (!increments) continue;
      gsi_insert_seq_before(&where, increments, GSI_SAME_STMT);
      inserted = true;
    }
    if (!inserted) return 0;
    // The new loads and stores of globals need virtual operands (GIMPLE's chain of memory
    // states); renaming the virtual operands threads them into the function's chain.
    mark_virtual_operands_for_renaming(fun);
    return TODO_update_ssa_only_virtuals;
  }
};

}  // namespace

int plugin_init(plugin_name_args* info, plugin_gcc_version* version) {
  if (!plugin_default_version_check(version, &gcc_version)) {
    error("%s: built for GCC %s, loaded into GCC %s: rebuild the plugin", info->base_name,
          gcc_version.basever, version->basever);
    return 1;
  }
  static plugin_info about = {"1", "counts float, double, special-function and statement executions"};
  register_callback(info->base_name, PLUGIN_INFO, nullptr, &about);
  register_pass_info after_optimized = {new OpCountPass(g), "optimized", 1, PASS_POS_INSERT_AFTER};
  register_callback(info->base_name, PLUGIN_PASS_MANAGER_SETUP, nullptr, &after_optimized);
  return 0;
}
