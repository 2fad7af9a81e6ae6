# The report: the paper-style stage table over every evaluated model, the RL stages' curves, the
# mixture's counts and the reward models' accuracy.

RL_STAGES = ["r1_zero", "reasoning_rl", "final_rl"]
REWARD_MODELS = [artifact(f"reward_model_{kind}") for kind in ("helpful", "harmless")]


rule report:
    input:
        evals=[eval_dir(stage) for stage in evaluated_models()],
        rl=[artifact(stage) for stage in RL_STAGES],
        mixture=artifact("mixture"),
        reward_models=REWARD_MODELS,
    output:
        report(directory(result("report")), patterns=["{name}.html"], category="Report",
               caption="../docs/report_caption.rst"),
    log:
        log_file("report"),
    benchmark:
        benchmark_file("report")
    params:
        stages=" ".join(evaluated_models()),
        eval_root=result("eval"),
    localrule: True
    container:
        image("cpu")
    shell:
        "python -m stages.report --eval_root {params.eval_root} --stages {params.stages} --rl_stages {input.rl}"
        " --mixture {input.mixture} --reward_models {input.reward_models} --output_dir {output} > {log} 2>&1"
