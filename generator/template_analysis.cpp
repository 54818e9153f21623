#include "generator/template_analysis.h"

#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/Attr.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/ExprCXX.h>
#include <clang/AST/ParentMapContext.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/AST/StmtCXX.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

namespace attune::gen {

namespace {

using namespace clang;  // NOLINT(google-build-using-namespace): AST code names many clang types

// kBlockM, block_m and blockm all normalize to "blockm".
std::string normalized(std::string name) {
  if (name.size() > 1 && name[0] == 'k' && std::isupper(static_cast<unsigned char>(name[1]))) name.erase(0, 1);
  std::string out;
  for (char c : name) {
    if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Names of calls only the primitives may make.
bool is_hardware_call(const std::string& name) {
  static const char* const kPrefixes[] = {"__shfl",     "__syncthreads", "__syncwarp",   "__nvvm_", "__ldmatrix",
                                          "__pipeline", "__cvta",        "__mma",        "__hmma",  "atomicAdd",
                                          "__ballot",   "__activemask",  "__threadfence"};
  return std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
}

class TemplateVisitor : public RecursiveASTVisitor<TemplateVisitor> {
 public:
  TemplateVisitor(ASTContext& context, const AnalysisOptions& options, AnalysisResult& result)
      : context_(context), result_(result) {
    const std::string root = std::filesystem::weakly_canonical(options.root).string();
    templates_dir_ = root + "/templates/";
    primitives_dir_ = root + "/templates/primitives/";
  }

  bool shouldVisitTemplateInstantiations() const { return false; }  // rules apply to what was written
  bool shouldVisitImplicitCode() const { return false; }

  bool VisitVarDecl(VarDecl* var) {
    if (in_rules_scope(var->getLocation()) && var->hasAttr<CUDASharedAttr>()) {
      error(var->getLocation(),
            "static __shared__ variable '" + var->getNameAsString() +
                "' in a template: take shared memory from dev::shared_memory<T>() (its size is a launch parameter)");
    }
    return true;
  }

  bool VisitGCCAsmStmt(GCCAsmStmt* stmt) {
    if (in_rules_scope(stmt->getAsmLoc())) {
      error(stmt->getAsmLoc(), "inline asm outside templates/primitives/: wrap the instruction in a primitive");
    }
    return true;
  }

  bool VisitCallExpr(CallExpr* call) {
    if (!in_rules_scope(call->getBeginLoc())) return true;
    std::string name;
    if (const FunctionDecl* callee = call->getDirectCallee()) {
      name = callee->getNameAsString();
    } else if (const auto* lookup = dyn_cast<UnresolvedLookupExpr>(call->getCallee()->IgnoreParenImpCasts())) {
      name = lookup->getName().getAsString();
    }
    if (is_hardware_call(name)) {
      error(call->getBeginLoc(), "call to '" + name +
                                     "' outside templates/primitives/: use the dev:: primitive (block::sync, "
                                     "warp::shfl_xor, ...) so the emulator sees it");
    }
    return true;
  }

  bool VisitUnaryOperator(UnaryOperator* op) {
    if (op->getOpcode() == UO_Deref && in_rules_scope(op->getOperatorLoc())) {
      const QualType type = op->getSubExpr()->getType();
      if (type->isPointerType()) {
        error(op->getOperatorLoc(),
              "memory accessed through a raw pointer: use dev::load_global/store_global/load_shared/store_shared "
              "so the emulator can check the access");
      }
    }
    return true;
  }

  bool VisitArraySubscriptExpr(ArraySubscriptExpr* subscript) {
    if (!in_rules_scope(subscript->getBeginLoc())) return true;
    const Expr* base = subscript->getBase()->IgnoreParenImpCasts();
    if (!is_array_like(base)) {
      if (base->getType()->isPointerType()) {
        error(subscript->getBeginLoc(),
              "memory accessed through a raw pointer subscript: use dev::load_global/store_global/load_shared/"
              "store_shared so the emulator can check the access");
      }
      return true;
    }
    if (!is_register_array(base)) return true;
    std::string culprit;
    if (!compile_time(subscript->getIdx(), &culprit)) {
      error(subscript->getIdx()->getBeginLoc(),
            "register array indexed by '" + culprit +
                "', which is neither a compile-time constant nor the counter of an unrolled loop "
                "(ATTUNE_UNROLL): the array would live in local memory");
    }
    return true;
  }

  bool VisitFunctionTemplateDecl(FunctionTemplateDecl* ft) {
    const FunctionDecl* fn = ft->getTemplatedDecl();
    if (!fn->hasAttr<CUDAGlobalAttr>() || !in_rules_scope(fn->getLocation())) return true;
    KernelInfo kernel;
    kernel.name = fn->getNameAsString();
    kernel.qualified_name = ft->getQualifiedNameAsString();
    kernel.header = relative_path(fn->getLocation());
    const TemplateParameterList* params = ft->getTemplateParameters();
    bool has_dtype = false;
    for (const NamedDecl* param : *params) {
      if (const auto* nttp = dyn_cast<NonTypeTemplateParmDecl>(param)) {
        // After the dtype: features (score modifiers), on or off by the problem.
        if (has_dtype) {
          kernel.features.push_back(feature_key(nttp->getNameAsString()));
        } else {
          kernel.tunables.push_back({nttp->getNameAsString(), "", {}});
        }
      } else if (isa<TemplateTypeParmDecl>(param) && param->getNameAsString() == "DType" && !has_dtype) {
        has_dtype = true;
      } else {
        error(param->getLocation(), "kernel template parameter '" + param->getNameAsString() +
                                        "': expected int tunables, 'class DType', then int features");
      }
    }
    if (!has_dtype) error(fn->getLocation(), "kernel '" + kernel.name + "' has no 'class DType' template parameter");
    if (fn->getNumParams() != 1 || fn->getParamDecl(0)->getType()->getAsCXXRecordDecl() == nullptr) {
      error(fn->getLocation(), "kernel '" + kernel.name +
                                   "' must take exactly one params struct by value: problem sizes travel there, "
                                   "tunables are template parameters");
    } else {
      const CXXRecordDecl* record = fn->getParamDecl(0)->getType()->getAsCXXRecordDecl();
      kernel.params_type = record->getQualifiedNameAsString();
      for (const FieldDecl* field : record->fields()) {
        for (const auto* note : field->specific_attrs<AnnotateAttr>()) {
          const std::string text = note->getAnnotation().str();
          const std::string prefix = "attune_tunable_of ";
          if (text.rfind(prefix, 0) != 0) continue;
          const std::string rest = text.substr(prefix.size());
          const std::size_t space = rest.find(' ');
          kernel.tunable_fields.push_back({field->getNameAsString(), rest.substr(0, space),
                                           space == std::string::npos ? "" : rest.substr(space + 1),
                                           where(field->getLocation())});
        }
        for (const TunableInfo& t : kernel.tunables) {
          // Allowed where the field says it carries the kernel's own tunable
          // (ATTUNE_TUNABLE_OF): the emulator's instantiation reads it.
          const bool declared =
              std::any_of(kernel.tunable_fields.begin(), kernel.tunable_fields.end(), [&](const TunableField& f) {
                return f.field == field->getNameAsString() && f.kernel == kernel.name && f.tunable == t.name;
              });
          if (!declared && normalized(field->getNameAsString()) == normalized(t.name)) {
            error(field->getLocation(), "field '" + field->getNameAsString() + "' of " + kernel.params_type +
                                            " carries tunable " + t.name +
                                            ": tunables are template parameters, never runtime arguments");
          }
        }
      }
    }
    kernels_.push_back({kernel, fn->getLocation()});
    return true;
  }

  bool VisitCXXRecordDecl(CXXRecordDecl* record) {
    if (record->isThisDeclarationADefinition() && in_rules_scope(record->getLocation())) {
      records_[record->getNameAsString()] = record;
    }
    return true;
  }

  // After the traversal: read each kernel's tunable space.
  void finish() {
    for (auto& [kernel, location] : kernels_) {
      const std::string struct_name = camel_case(kernel.name) + "Tunables";
      auto it = records_.find(struct_name);
      if (it == records_.end()) {
        error(location, "kernel '" + kernel.name + "' has no tunable space: declare struct " + struct_name +
                            " with one value list per template parameter");
        continue;
      }
      const CXXRecordDecl* record = it->second;
      kernel.tunables_struct = record->getQualifiedNameAsString();
      std::vector<std::string> id_keys;
      if (const VarDecl* keys = member(record, "kIdKeys")) id_keys = strings_of(keys);
      if (id_keys.size() != kernel.tunables.size()) {
        error(record->getLocation(), struct_name + "::kIdKeys must name " + std::to_string(kernel.tunables.size()) +
                                         " variant-id keys, one per tunable");
      }
      // Optional: the architectures the kernel compiles for (none: every one).
      if (const VarDecl* archs = member(record, "kArchs")) kernel.archs = strings_of(archs);
      // Optional: tunables the emulator's instantiation reads from the params.
      if (const VarDecl* names = member(record, "kEmulatedAtRunTime")) {
        kernel.emulated_at_run_time = strings_of(names);
        for (const std::string& name : kernel.emulated_at_run_time) {
          const bool carried =
              std::any_of(kernel.tunable_fields.begin(), kernel.tunable_fields.end(),
                          [&](const TunableField& f) { return f.kernel == kernel.name && f.tunable == name; });
          if (!carried || name == kernel.tunables.front().name) {
            std::string what = struct_name + "::kEmulatedAtRunTime names ";
            what += name;
            what += ", which must be a tunable other than the first carried by a field of ";
            what += kernel.params_type;
            what += " (ATTUNE_TUNABLE_OF(" + kernel.name + ", " + name + "))";
            error(names->getLocation(), what);
          }
        }
      }
      for (std::size_t i = 0; i < kernel.tunables.size(); ++i) {
        TunableInfo& t = kernel.tunables[i];
        if (i < id_keys.size()) t.id_key = id_keys[i];
        const VarDecl* values = member(record, t.name);
        if (values == nullptr) {
          error(record->getLocation(), "tunable " + t.name + " of " + kernel.name + " has no value list in " +
                                           struct_name + " (static constexpr int " + t.name + "[] = {...})");
          continue;
        }
        t.values = ints_of(values);
        if (t.values.empty()) error(values->getLocation(), "tunable " + t.name + " has an empty value list");
      }
      for (const char* function : {"valid", "threads", "shared_bytes"}) {
        if (!has_method(record, function, kernel.tunables.size())) {
          error(record->getLocation(), struct_name + " needs static constexpr " + function + "(" +
                                           std::to_string(kernel.tunables.size()) + " ints)");
        }
      }
      result_.kernels.push_back(kernel);
    }
  }

 private:
  std::string file_of(SourceLocation loc) const {
    const SourceManager& sm = context_.getSourceManager();
    const SourceLocation spelling = sm.getSpellingLoc(loc);
    if (const FileEntry* entry = sm.getFileEntryForID(sm.getFileID(spelling))) {
      return std::filesystem::weakly_canonical(entry->getName().str()).string();
    }
    return "";
  }

  bool in_rules_scope(SourceLocation loc) const {
    const std::string file = file_of(loc);
    return file.rfind(templates_dir_, 0) == 0 && file.rfind(primitives_dir_, 0) != 0;
  }

  std::string where(SourceLocation loc) const {
    const SourceManager& sm = context_.getSourceManager();
    return relative_path(loc) + ":" + std::to_string(sm.getSpellingLineNumber(loc));
  }

  std::string relative_path(SourceLocation loc) const {
    const std::string file = file_of(loc);
    const std::string root = templates_dir_.substr(0, templates_dir_.size() - std::string("templates/").size());
    return file.rfind(root, 0) == 0 ? file.substr(root.size()) : file;
  }

  void error(SourceLocation loc, const std::string& message) {
    DiagnosticsEngine& diags = context_.getDiagnostics();
    const unsigned id = diags.getCustomDiagID(DiagnosticsEngine::Error, "%0");
    diags.Report(loc, id) << message;
  }

  static bool is_array_like(const Expr* e) {
    QualType type = e->getType();
    if (type->isReferenceType()) type = type.getNonReferenceType();
    return type->isArrayType() || isa<ArraySubscriptExpr>(e);
  }

  // A local array, an array parameter by reference, or an array member of a
  // local struct: all live in registers when indexed by constants.
  bool is_register_array(const Expr* e) const {
    while (const auto* inner = dyn_cast<ArraySubscriptExpr>(e)) e = inner->getBase()->IgnoreParenImpCasts();
    if (const auto* member = dyn_cast<MemberExpr>(e)) {
      e = member->getBase()->IgnoreParenImpCasts();
      if (member->isArrow()) return false;
    }
    if (const auto* ref = dyn_cast<DeclRefExpr>(e)) {
      if (const auto* var = dyn_cast<VarDecl>(ref->getDecl())) {
        return var->hasLocalStorage() && !var->hasAttr<CUDASharedAttr>();
      }
    }
    return false;
  }

  bool unrolled_loop_counter(const VarDecl* var) const {
    for (const DynTypedNode& parent : context_.getParents(*var)) {
      const auto* decl_stmt = parent.get<DeclStmt>();
      if (decl_stmt == nullptr) continue;
      for (const DynTypedNode& grand : context_.getParents(*decl_stmt)) {
        const auto* loop = grand.get<ForStmt>();
        if (loop == nullptr || loop->getInit() != decl_stmt) continue;
        for (const DynTypedNode& outer : context_.getParents(*loop)) {
          if (const auto* attributed = outer.get<AttributedStmt>()) {
            for (const Attr* attr : attributed->getAttrs()) {
              if (isa<LoopHintAttr>(attr)) return true;
            }
          }
        }
      }
    }
    return false;
  }

  // True when every name in `e` is a constant, a template parameter, the
  // counter of an unrolled loop, or a const local computed from those.
  bool compile_time(const Stmt* e, std::string* culprit) const {
    if (e == nullptr) return true;
    if (const auto* ref = dyn_cast<DeclRefExpr>(e)) {
      const ValueDecl* decl = ref->getDecl();
      if (isa<NonTypeTemplateParmDecl>(decl) || isa<EnumConstantDecl>(decl)) return true;
      if (const auto* var = dyn_cast<VarDecl>(decl)) {
        if (var->isConstexpr()) return true;
        if (unrolled_loop_counter(var)) return true;
        if (var->getType().isConstQualified() && var->hasInit()) {
          if (compile_time(var->getInit(), culprit)) return true;
          *culprit = var->getNameAsString();  // name what the reader sees at the subscript
          return false;
        }
      }
      *culprit = decl->getNameAsString();
      return false;
    }
    if (isa<DependentScopeDeclRefExpr>(e)) return true;  // Config::kSomething
    if (isa<CallExpr>(e) && !isa<CXXOperatorCallExpr>(e)) {
      *culprit = "a function call";
      return false;
    }
    for (const Stmt* child : e->children()) {
      if (!compile_time(child, culprit)) return false;
    }
    return true;
  }

  // The record's public bases with a definition, so that tunable spaces
  // sharing their lists (kernels with the same launch shape) can inherit them.
  static std::vector<const CXXRecordDecl*> bases_of(const CXXRecordDecl* record) {
    std::vector<const CXXRecordDecl*> out;
    for (const CXXBaseSpecifier& base : record->bases()) {
      if (const CXXRecordDecl* b = base.getType()->getAsCXXRecordDecl(); b != nullptr && b->hasDefinition()) {
        out.push_back(b->getDefinition());
      }
    }
    return out;
  }

  static const VarDecl* member(const CXXRecordDecl* record, const std::string& name) {
    for (const Decl* d : record->decls()) {
      if (const auto* var = dyn_cast<VarDecl>(d)) {
        if (var->getNameAsString() == name) return var;
      }
    }
    for (const CXXRecordDecl* base : bases_of(record)) {
      if (const VarDecl* var = member(base, name)) return var;
    }
    return nullptr;
  }

  static bool has_method(const CXXRecordDecl* record, const std::string& name, std::size_t arity) {
    const bool own = std::any_of(record->method_begin(), record->method_end(), [&](const CXXMethodDecl* m) {
      return m->getNameAsString() == name && m->isStatic() && m->isConstexpr() && m->getNumParams() == arity;
    });
    if (own) return true;
    const std::vector<const CXXRecordDecl*> bases = bases_of(record);
    return std::any_of(bases.begin(), bases.end(),
                       [&](const CXXRecordDecl* base) { return has_method(base, name, arity); });
  }

  std::vector<int> ints_of(const VarDecl* var) const {
    std::vector<int> out;
    const auto* list = dyn_cast_or_null<InitListExpr>(var->getInit());
    if (list == nullptr) return out;
    for (const Expr* element : list->inits()) {
      Expr::EvalResult value;
      if (element->EvaluateAsInt(value, context_)) out.push_back(static_cast<int>(value.Val.getInt().getExtValue()));
    }
    return out;
  }

  static std::vector<std::string> strings_of(const VarDecl* var) {
    std::vector<std::string> out;
    const auto* list = dyn_cast_or_null<InitListExpr>(var->getInit());
    if (list == nullptr) return out;
    for (const Expr* element : list->inits()) {
      if (const auto* text = dyn_cast<StringLiteral>(element->IgnoreParenImpCasts()))
        out.push_back(text->getString().str());
    }
    return out;
  }

  ASTContext& context_;
  AnalysisResult& result_;
  std::string templates_dir_;
  std::string primitives_dir_;
  std::vector<std::pair<KernelInfo, SourceLocation>> kernels_;
  std::map<std::string, const CXXRecordDecl*> records_;
};

class Consumer : public ASTConsumer {
 public:
  Consumer(const AnalysisOptions& options, AnalysisResult& result) : options_(options), result_(result) {}
  void HandleTranslationUnit(ASTContext& context) override {
    TemplateVisitor visitor(context, options_, result_);
    visitor.TraverseDecl(context.getTranslationUnitDecl());
    visitor.finish();
    const SourceManager& sm = context.getSourceManager();
    for (auto it = sm.fileinfo_begin(); it != sm.fileinfo_end(); ++it) {
      result_.sources.push_back(it->getFirst()->getName().str());
    }
  }

 private:
  const AnalysisOptions& options_;
  AnalysisResult& result_;
};

class Action : public ASTFrontendAction {
 public:
  Action(const AnalysisOptions& options, AnalysisResult& result) : options_(options), result_(result) {}
  std::unique_ptr<ASTConsumer> CreateASTConsumer(CompilerInstance& /*ci*/, StringRef /*file*/) override {
    return std::make_unique<Consumer>(options_, result_);
  }

 private:
  const AnalysisOptions& options_;
  AnalysisResult& result_;
};

class Factory : public tooling::FrontendActionFactory {
 public:
  Factory(const AnalysisOptions& options, AnalysisResult& result) : options_(options), result_(result) {}
  std::unique_ptr<FrontendAction> create() override { return std::make_unique<Action>(options_, result_); }

 private:
  const AnalysisOptions& options_;
  AnalysisResult& result_;
};

}  // namespace

AnalysisResult analyze_template(const std::string& path, const AnalysisOptions& options) {
  AnalysisResult result;
  const std::vector<std::string> args = {"-x",
                                         "cuda",
                                         "--cuda-device-only",
                                         "-nocudainc",
                                         "-nocudalib",
                                         "--cuda-gpu-arch=sm_80",
                                         "-std=c++20",
                                         "-fsyntax-only",
                                         "-Wno-unknown-cuda-version",
                                         "-Wno-pragma-once-outside-header",
                                         "-resource-dir=" + options.resource_dir,
                                         "-I" + options.root,
                                         "-include",
                                         options.prelude};
  tooling::FixedCompilationDatabase database(".", args);
  tooling::ClangTool tool(database, {path});
  Factory factory(options, result);
  const int status = tool.run(&factory);
  result.ok = status == 0;
  return result;
}

}  // namespace attune::gen
