"""Advice in the language of the framework the job runs, and never for what it already does.

The step diagnoses name generic fixes ("increase DataLoader num_workers", "precision (AMP)").
A user of the HF Trainer sets ``dataloader_num_workers`` in ``TrainingArguments``; a Lightning
user sets ``num_workers`` on the DataLoader that ``train_dataloader()`` returns. And the stacks
show what the job already does: a forward under ``autocast`` already runs mixed precision, a
``_MultiProcessingDataLoaderIter`` already has worker processes, frames of ``torch/_dynamo`` are
already compiled. Those fixes are not suggested again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from traceml_attach.diagnose.finding import Finding, StepEvidence
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.steps.steptime import RankStepStats


@dataclass(frozen=True)
class Dialect:
    workers: str    # how to add DataLoader worker processes
    amp: str        # how to turn on mixed precision
    compile: str    # how to compile the model


PLAIN = Dialect("increase DataLoader num_workers (with pin_memory and non_blocking copies)",
                "precision (AMP: torch.autocast)", "torch.compile")
DIALECTS: dict[str, Dialect] = {   # by the framework name's first word(s), see rules.toml
    "HF Trainer": Dialect("raise TrainingArguments(dataloader_num_workers=...) (and dataloader_pin_memory)",
                          "TrainingArguments(bf16=True) or fp16=True", "TrainingArguments(torch_compile=True)"),
    "Lightning": Dialect("set num_workers (and persistent_workers=True) on the DataLoader that "
                         "train_dataloader() returns", "Trainer(precision=\"bf16-mixed\")",
                         "torch.compile(model) before trainer.fit"),
    "Accelerate": Dialect("set num_workers on the DataLoader passed to accelerator.prepare",
                          "Accelerator(mixed_precision=\"bf16\")", "Accelerator(dynamo_backend=\"inductor\")"),
    "DeepSpeed": Dialect("set num_workers on the training DataLoader",
                         "\"bf16\": {\"enabled\": true} in the DeepSpeed config", "torch.compile (engine.compile())"),
}


def dialect_of(framework: str | None) -> Dialect:
    if framework is None:
        return PLAIN
    return next((d for name, d in DIALECTS.items() if framework.startswith(name)), PLAIN)


def _job(ranks: list[RankStepStats]) -> tuple[str | None, frozenset[str]]:
    """The framework most ranks run, and the traits any rank's stacks show."""
    named = Counter(r.framework for r in ranks if r.framework)
    framework = min(named, key=lambda n: (-named[n], n)) if named else None
    return framework, frozenset().union(*(r.traits for r in ranks))


def _input_action(d: Dialect, traits: frozenset[str]) -> str:
    if "loader_workers" in traits:
        return ("the DataLoader already runs worker processes (the stacks show them) and they do not keep up: "
                "cut per-sample preprocessing (see the hot input frames), and add workers only while the host "
                "has idle cores")
    return f"{d.workers}; cut per-sample preprocessing; see the hot input frames"


def _compute_action(d: Dialect, traits: frozenset[str], gpu: bool) -> str:
    ideas = [] if gpu else ["batch size"]
    if "autocast" not in traits:
        ideas.append(d.amp)
    if "compiled" not in traits:
        ideas.append(d.compile)
    if gpu:
        ideas.append("batch size")
    done = [what for trait, what in (("autocast", "mixed precision"), ("compiled", "torch.compile"))
            if trait in traits]
    already = f" (already on: {', '.join(done)})" if done else ""
    head = "optimize GPU compute" if gpu else "optimize the largest compute phase"
    tail = "; profile the kernels" if gpu else ", then an operator profiler on the hot frames"
    return f"{head}: {', '.join(ideas)}{already}{tail}"


def speak(findings: list[Finding], ranks: list[RankStepStats]) -> list[Finding]:
    """The findings with their actions in the job's framework's terms, less what it already does."""
    framework, traits = _job(ranks)
    if framework is None and not traits:
        return findings
    d = dialect_of(framework)
    out = []
    for f in findings:
        if f.kind == Kind.INPUT_BOUND:
            f = replace(f, action=_input_action(d, traits))
        elif f.kind == Kind.COMPUTE_BOUND:
            gpu = isinstance(f.evidence, StepEvidence) and f.evidence.gpu_sm_util is not None   # refine_with_gpu's
            f = replace(f, action=_compute_action(d, traits, gpu))
        out.append(f)
    return out
