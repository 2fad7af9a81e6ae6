import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from stages import grpo
from stages.grpo import general_prompt_rows, prompt_dataset, stop_settings
from stages.lib.configs import GRPOStageConfig
from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.sandbox import isolation_problem
from stages.lib.templates import CHAT, R1_ZERO
from tests.conftest import run_card_snippet

CURVE_KEYS = ("reward", "rewards/accuracy/mean", "rewards/format/mean", "completions/mean_length", "kl",
              "clip_ratio/region_mean", "frac_reward_zero_std", "accuracy/verify_timeouts")


def test_r1_zero_grpo_trains_and_writes_curves(tiny_model_dir, small_data_dir, tmp_path, capsys):
    out = tmp_path / "r1_zero"
    own = tmp_path / "mine" / "my_rewards.py"  # a reward of the user's own, outside the checkout
    own.parent.mkdir()
    own.write_text("def brevity(prompts, completions, completion_ids, **kwargs):\n"
                   "    return [1.0 - len(ids) / 12 for ids in completion_ids]\n")
    grpo.main(["--stage", "r1_zero", "--template", "r1_zero", "--model_path", str(tiny_model_dir),
               "--train_data", str(small_data_dir / "rl_prompts.parquet"), "--output_dir", str(out),
               "--rewards", "accuracy", "format", f"{own}:brevity", "--reward_weights", "1", "1", "0.5",
               "--learning_rate", "1e-4", "--num_generations", "4", "--questions_per_step", "2",
               "--max_completion_length", "12", "--max_steps", "3", "--logging_steps", "1", "--save_steps", "2"])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    step_rows = [r for r in rows if "reward" in r]
    assert [r["step"] for r in step_rows] == [1, 2, 3]
    for key in (*CURVE_KEYS, "rewards/brevity/mean"):
        assert key in step_rows[-1], key
    assert (out / "training_curves.png").stat().st_size > 10_000
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "r1_zero" and "last_reward" in manifest["metrics"]
    assert "last_rewards/brevity/mean" in manifest["metrics"]
    assert manifest["inputs"]["reward_brevity"] == {"path": str(own),
                                                    "sha256": hashlib.sha256(own.read_bytes()).hexdigest()}
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(" (")[0] for line in progress] == ["step 1/3", "step 2/3", "step 3/3"]
    assert all(" | reward " in line and " | accuracy " in line and " ETA " in line for line in progress), progress
    card = (out / "README.md").read_text()
    assert card.startswith("# R1-Zero") and "data/templates/r1_zero.txt" in card
    assert f"- rewards (weight): accuracy 1, format 1, {own}:brevity 0.5\n" in card
    run_card_snippet(card, tmp_path)  # the raw-text template and the stop at </answer>, as written
    model = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    # The stop at </answer> was for this stage's sampling only.
    assert model.generation_config.eos_token_id == base.generation_config.eos_token_id
    assert (tmp_path / "r1_zero.work" / "checkpoint-2").is_dir()
    # a few sampled completions per logging step, with each reward, whatever the tracker (none here)
    samples = [json.loads(line) for line in (out / "completions.jsonl").open()]
    assert [row["step"] for row in samples] == [1] * 4 + [2] * 4 + [3] * 4
    assert set(samples[0]["rewards"]) == {"accuracy", "format", "brevity"}  # the stage's own reward too
    assert isinstance(samples[0]["prompt"], str) and isinstance(samples[0]["completion"], str)


def test_reasoning_rl_with_the_language_reward_on_chat_prompts(tiny_model_dir, small_data_dir, tmp_path):
    out = tmp_path / "dev2"
    grpo.main(["--stage", "reasoning_rl", "--template", "chat", "--model_path", str(tiny_model_dir),
               "--train_data", str(small_data_dir / "rl_prompts.parquet"), "--output_dir", str(out),
               "--rewards", "accuracy", "format", "language", "--reward_weights", "1", "1", "1",
               "--num_generations", "2", "--questions_per_step", "2", "--max_completion_length", "8",
               "--max_steps", "2", "--beta", "0", "--save_steps", "10"])
    last = [json.loads(line) for line in (out / "metrics.jsonl").open()][-2]
    assert "rewards/language/mean" in last and "kl" not in last


def test_code_rows_train_beside_math_rows_with_the_code_reward(tiny_model_dir, tmp_path):
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    tests = json.dumps([{"input": "", "output": "11\n"}])
    rows = [{"id": "c1", "prompt": "Write a Python program that prints 3 + 4 * 2.", "solution": "", "tests": tests},
            {"id": "m1", "prompt": "What is 2 + 2?", "solution": "4", "tests": ""}]
    data = tmp_path / "rl.parquet"
    pq.write_table(pa.Table.from_pylist([dict(row, level=1, domain="code" if row["tests"] else "math",
                                              worked_solution="") for row in rows]), data)
    dataset = prompt_dataset([str(data)], CHAT)
    assert dataset["tests_at"] == [f"{data.resolve()}#0", None] and dataset["solution"] == [None, "4"]
    out = tmp_path / "dev2"
    grpo.main(["--stage", "reasoning_rl", "--template", "chat", "--model_path", str(tiny_model_dir),
               "--train_data", str(data), "--output_dir", str(out), "--rewards", "accuracy", "code", "format",
               "--reward_weights", "1", "1", "1", "--num_generations", "2", "--questions_per_step", "2",
               "--max_completion_length", "8", "--max_steps", "2", "--beta", "0", "--save_steps", "10"])
    last = [json.loads(line) for line in (out / "metrics.jsonl").open()][-2]
    assert last["rewards/code/mean"] == 0.0  # scored (a seconds-trained model writes no program), not skipped


def test_code_rows_carry_where_their_tests_are_and_the_reward_reads_them_there(tmp_path):
    """The real code set holds ~145 KB of tests a row: no process of a GRPO job holds them all (bench/code_tests.py
    measures the memory); the code reward reads a scored row's cases from its row group."""
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    rows = [{"id": f"c{n}", "prompt": f"Print {n} squared.", "solution": "", "level": 1, "domain": "code",
             "worked_solution": "", "tests": json.dumps([{"input": "", "output": f"{n * n}\n"}])} for n in range(7)]
    data = tmp_path / "rl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data, row_group_size=2)  # four row groups
    dataset = prompt_dataset([str(data)], CHAT)
    assert "tests" not in dataset.column_names
    (code,) = build_reward_functions(["code"], RewardSettings(template="chat"))
    picked = [dataset[i] for i in (5, 1, 6, 2)]  # across groups, back and forth
    answers = [25, 1, 35, 4]  # the third is wrong
    completions = [f"<think>\nsquare it\n</think>\n\n```python\nprint({a})\n```" for a in answers]
    scores = code(prompts=[r["prompt"] for r in picked], completions=completions,
                  **{key: [r[key] for r in picked] for key in dataset.column_names if key != "prompt"})
    assert scores == [1.0, 1.0, 0.0, 1.0]


def test_a_rollout_is_sampled_once_and_trained_as_several_steps(tiny_model_dir, small_data_dir, tmp_path):
    """The paper's shape: 8,192 outputs sampled at once, trained as 16 steps (steps_per_rollout)."""
    out = tmp_path / "r1_zero"
    grpo.main(["--stage", "r1_zero", "--template", "r1_zero", "--model_path", str(tiny_model_dir),
               "--train_data", str(small_data_dir / "rl_prompts.parquet"), "--output_dir", str(out),
               "--num_generations", "4", "--questions_per_step", "2", "--max_completion_length", "8",
               "--max_steps", "4", "--logging_steps", "1", "--save_steps", "100", "--steps_per_rollout", "2"])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert [r["step"] for r in rows if r.get("reward") is not None] == [1, 3]  # sampled at each rollout's start
    assert [r["step"] for r in rows if r.get("loss") is not None] == [1, 2, 3, 4]
    args = grpo.trainer_arguments(GRPOStageConfig(model_path="m", train_data=["d"], output_dir=str(tmp_path / "o"),
                                                  steps_per_rollout=16, gradient_accumulation_steps=4), 8, {})
    # TRL's generation batch on 8 processes: 512 questions x 16 outputs
    assert args.steps_per_generation == 64 and args.per_device_train_batch_size * 8 * 64 == 32 * 16 * 16


def test_final_rls_general_phase_starts_with_a_rollout():
    config = GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o", max_steps=1700, steps_per_rollout=16,
                             general_data=["g"])
    assert grpo.general_phase_start(config) == 1296  # the paper's last 400 of 1,700 steps, at a rollout's start
    assert grpo.general_phase_start(GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o",
                                                    max_steps=1700)) == 1300


def test_batch_that_does_not_split_is_named():
    config = GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o", num_generations=3,
                             questions_per_step=3, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="9 completions per step do not split"):
        config.per_device_batch_size(world_size=1)
    assert GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o").per_device_batch_size(4) == 128


def test_reward_weights_must_match_rewards():
    config = GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o", reward_weights=[1.0])
    assert config.problems() == ["reward_weights has 1 value(s) but rewards names 2: ['accuracy', 'format']"]


def test_prompts_per_template(small_data_dir):
    raw = prompt_dataset([str(small_data_dir / "rl_prompts.parquet")], R1_ZERO, max_prompts=3)
    assert len(raw) == 3 and raw[0]["prompt"].startswith("A conversation between User and Assistant.")
    chat = prompt_dataset([str(small_data_dir / "rl_prompts.parquet")], CHAT, max_prompts=2)
    assert chat[0]["prompt"][0]["role"] == "user" and "\\boxed{}" in chat[0]["prompt"][0]["content"]
    assert chat[0]["solution"] == raw[0]["solution"]


def test_prompts_over_the_length_limit_are_dropped(small_data_dir, tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = [str(small_data_dir / "rl_prompts.parquet")]
    everything = prompt_dataset(path, CHAT, tokenizer=tokenizer)
    lengths = sorted(len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"])
                     for row in everything)
    limit = lengths[len(lengths) // 2]
    kept = prompt_dataset(path, CHAT, tokenizer=tokenizer, max_prompt_length=limit)
    assert len(kept) == sum(n <= limit for n in lengths) < len(everything)
    with pytest.raises(ValueError, match="fits max_prompt_length=1"):
        prompt_dataset(path, CHAT, tokenizer=tokenizer, max_prompt_length=1)


def test_general_prompts_over_the_length_limit_are_dropped_too(small_data_dir, tiny_model_dir):
    """Final RL's general prompts go to the same vLLM engine: one as long as its context fails the step."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    path = [str(small_data_dir / "rl_general.parquet")]
    everything = general_prompt_rows(path, CHAT, tokenizer)
    lengths = sorted(len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)["input_ids"])
                     for row in everything)
    limit = lengths[len(lengths) // 2]
    kept = general_prompt_rows(path, CHAT, tokenizer, max_prompt_length=limit)
    assert len(kept) == sum(n <= limit for n in lengths) < len(everything)


def test_r1_zero_stops_at_the_answer_tag(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids, vllm_stop = stop_settings(tokenizer, R1_ZERO, use_vllm=False)
    assert ids == [tokenizer.convert_tokens_to_ids("</answer>")] and vllm_stop == {}
    assert stop_settings(tokenizer, CHAT, use_vllm=False) == ([], {})


def test_final_rl_routes_rewards_and_starts_the_general_phase_on_schedule(tiny_model_dir, small_data_dir,
                                                                         helpful_reward_model_dir, tmp_path):
    out = tmp_path / "r1"
    grpo.main(["--stage", "final_rl", "--template", "chat", "--model_path", str(tiny_model_dir),
               "--train_data", str(small_data_dir / "rl_prompts.parquet"),
               "--general_data", str(small_data_dir / "rl_general.parquet"),
               "--helpful_reward_model", str(helpful_reward_model_dir),
               "--output_dir", str(out),
               "--rewards", "accuracy", "format", "helpful_rm", "--reward_weights", "1", "1", "1",
               "--general_phase_fraction", "0.5", "--general_share", "0.5", "--num_generations", "2",
               "--questions_per_step", "4", "--max_completion_length", "8", "--max_steps", "4", "--beta", "0",
               "--logging_steps", "1", "--save_steps", "100"])
    rows = [r for r in map(json.loads, (out / "metrics.jsonl").open()) if "reward" in r]
    assert [r["general_phase"] for r in rows] == [0, 0, 1, 1]
    # Before the phase no prompt is general, so the reward model scores nothing.
    import math

    assert all(r["rewards/helpful_rm/mean"] is None or math.isnan(r["rewards/helpful_rm/mean"]) for r in rows[:2])
    assert all(0 < r["rewards/helpful_rm/mean"] < 1 for r in rows[2:])


def test_model_rewards_need_their_model():
    with pytest.raises(ValueError, match=r"reward\(s\) \['harmless_rm'\] need --harmless_reward_model"):
        grpo.build_rewards(GRPOStageConfig(model_path="m", train_data=["d"], output_dir="o",
                                           rewards=["accuracy", "harmless_rm"], reward_weights=[1, 1]), None)


def test_phased_prompts_hold_general_prompts_back_until_the_phase():
    reasoning = [{"prompt": f"r{i}", "solution": "1"} for i in range(10)]
    general = [{"prompt": f"g{i}", "solution": None} for i in range(5)]
    dataset = grpo.phased_prompts(reasoning, general, max_steps=4, questions_per_step=4, phase_start=3,
                                  general_share=0.5, seed=0)
    kinds = ["g" if row["prompt"].startswith("g") else "r" for row in dataset]
    assert len(kinds) == 16 and "g" not in kinds[:12] and kinds[12:].count("g") == 2


def test_a_resumed_run_keeps_the_reference_an_uninterrupted_run_has(tiny_model_dir, small_data_dir, tmp_path,
                                                                    monkeypatch):
    """A checkpoint holds no reference model: TRL rebuilt it from the stage's input, so a run resumed
    after a refresh computed its KL against the step-0 model (gpu-path-audit-3, N10). Here a run stopped
    at step 3 (as a Slurm time limit stops it) and resumed logs the KL of the uninterrupted run."""
    def argv(name):
        return ["--stage", "r1_zero", "--template", "r1_zero", "--model_path", str(tiny_model_dir),
                "--train_data", str(small_data_dir / "rl_prompts.parquet"), "--output_dir", str(tmp_path / name),
                "--work_dir", str(tmp_path / f"work-{name}"), "--learning_rate", "3e-3", "--beta", "0.1",
                "--ref_model_sync_steps", "2", "--num_generations", "4", "--questions_per_step", "2",
                "--max_completion_length", "8", "--max_steps", "5", "--logging_steps", "1", "--save_steps", "1",
                # rewards that vary between completions of a barely trained model: the policy moves
                "--rewards", "overlong", "tag_count", "--reward_weights", "1", "1", "--overlong_buffer", "8"]

    def kl_by_step(name):
        return {r["step"]: r["kl"] for r in map(json.loads, (tmp_path / name / "metrics.jsonl").open()) if "kl" in r}

    grpo.main(argv("whole"))

    class StopAtStep3(grpo.StopOnSignal):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                self.received = 15  # SIGTERM, as Slurm sends at the time limit
            return super().on_step_end(args, state, control, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(grpo, "StopOnSignal", StopAtStep3)
        with pytest.raises(SystemExit):
            grpo.main(argv("resumed"))
    assert sorted(p.name for p in (tmp_path / "work-resumed").glob("reference-*")) == ["reference-2"]
    grpo.main(argv("resumed"))
    whole, resumed = kl_by_step("whole"), kl_by_step("resumed")
    assert whole[4] > 0 and whole[2] != whole[4]  # the KL moves: a wrong reference would show
    assert resumed == pytest.approx(whole, rel=1e-5, abs=1e-9)
    # its sampled completions go on from the checkpoint: steps 1-3 of the stopped attempt, then 4-5
    assert [json.loads(line)["step"] for line in (tmp_path / "resumed" / "completions.jsonl").open()] == \
        [step for step in range(1, 6) for _ in range(4)]
    # its manifest's wall time counts the stopped attempt's, which checkpoint-3 recorded
    timing = json.loads((tmp_path / "resumed" / "manifest.json").read_text())["wall_time_counts"]
    assert "plus the earlier attempts' up to checkpoint-3" in timing, timing
