# The report: the paper-style stage table over every evaluated model, what each training stage did
# and its curves, sampled completions, the mixture's counts and the reward models' accuracy.

REWARD_MODELS = [artifact(f"reward_model_{kind}") for kind in ("helpful", "harmless")]
TRAINED = [artifact(stage) for stage in ("r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft")] + REWARD_MODELS + [
    artifact("final_rl")] + [result(student) for student in distilled_students()]


rule report:
    input:
        evals=[eval_dir(stage) for stage in evaluated_models()],
        trained=TRAINED,
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
        eval_root=lambda wildcards, input: os.path.dirname(input.evals[0]),
    localrule: True
    container:
        image("cpu")
    shell:
        "python -m stages.report --eval_root {params.eval_root} --stages {params.stages} --trained {input.trained}"
        " --mixture {input.mixture} --reward_models {input.reward_models} --output_dir {output} > {log} 2>&1"
