"""The reading path of one RL step: what tools/step_lines.py follows from trainer.rl_iteration.

A reader who starts at the trainer's step must never be led into FSDP code, and importing
the trainer must not import torch's FSDP modules (the fence is the `--fsdp` flag).
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from step_lines import Walker  # noqa: E402


def reached(method: str) -> set[str]:
    walker = Walker(ROOT, method)
    walker.run(["trainer.rl_iteration"])
    return {f"{module}.{name}" for module, name in walker.reached}


def test_the_step_reaches_sampler_kernel_and_update_but_no_fsdp_code():
    names = reached("respo")
    for needed in ("nano_respo.rollout.sample", "nano_respo.rollout.decode", "nano_respo.kernel.policy_loss",
                   "nano_respo.kernel.group_advantages", "nano_respo.trainer.rl_step",
                   "nano_respo.kernel.respo_coefficient"):
        assert needed in names
    assert not any(name.startswith(("nano_respo.scale", "nano_respo.lab", "nano_respo.run")) for name in names)
    walker = Walker(ROOT, "respo")
    walker.run(["trainer.rl_iteration"])
    assert len({module for module, _ in walker.reached}) <= 4  # files a reader opens


def test_the_systems_routes_are_the_runs_choice_not_the_steps():
    """--packed-forward, --shared-prompts and --lean-sampler reach the step as arguments (run.session.routes), so its reader meets
    only the padded forward and decode; started from those routes, the walk finds them."""
    names = reached("respo")
    for option in ("nano_respo.rollout.decode_lean", "nano_respo.rollout.pack", "nano_respo.rollout.packed_forward",
                   "nano_respo.rollout.packed_policy_logprobs", "nano_respo.rollout.pack_shared",
                   "nano_respo.rollout.shared_prompt_policy_logprobs"):
        assert option not in names
    walker = Walker(ROOT, "respo")
    walker.run(["trainer.rl_iteration", "rollout.decode_lean", "rollout.packed_policy_logprobs"])
    with_options = {f"{module}.{name}" for module, name in walker.reached}
    assert {"nano_respo.rollout.pack", "nano_respo.rollout.first_fit", "nano_respo.rollout.unpacked"} <= with_options


def test_a_method_table_is_followed_along_one_row_unless_all_are_asked_for():
    respo, every = reached("respo"), reached("all")
    assert "nano_respo.kernel.sapo_coefficient" not in respo
    assert {"nano_respo.kernel.sapo_coefficient", "nano_respo.kernel.clip_coefficient"} <= every
    assert reached("seq_clip") - respo == {"nano_respo.kernel.clip_coefficient"}


def test_importing_the_trainer_leaves_fsdp_unimported():
    code = "import sys, nano_respo.trainer; print('torch.distributed.fsdp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_a_single_device_run_imports_no_scale_out_or_lab_code(tmp_path):
    """train.py's whole single-device path (config, session, trainer) leaves scale/ and lab/ unimported."""
    # The answer goes to a file, not a pipe: a helper process that an import may start (multiprocessing's
    # resource tracker) inherits the child's pipes and would keep them open after the child exits.
    answer = tmp_path / "imported.txt"
    code = ("import sys, nano_respo.run.config, nano_respo.run.session, nano_respo.trainer; "
            f"open({str(answer)!r}, 'w').write(repr(sorted(m for m in sys.modules "
            "if m.startswith(('nano_respo.scale', 'nano_respo.lab')))))")
    subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, check=True, cwd=ROOT, timeout=300)
    assert answer.read_text() == "[]"
