# The report: the paper-style stage table over every evaluated model, what each training stage did
# and its curves, sampled completions, the mixture's counts and the reward models' accuracy.

REWARD_MODELS = [artifact(output) for output in stage_outputs("reward_model")]
TRAINED = [artifact(output) for output in stage_outputs("grpo", "sft", "reward_model")]  # in the recipe's order


rule report:
    input:
        evals=[eval_dir(stage) for stage in evaluated_models()],
        trained=TRAINED,
        mixture=artifact("rejection_sampling"),
        reward_models=REWARD_MODELS,
    output:
        report(directory(result("report")), patterns=["{name}.html"], category="Report",
               caption="../docs/report_caption.rst"),
    log:
        log_file("report"),
    benchmark:
        benchmark_file("report")
    params:
        evals=lambda wildcards, input: " ".join(f"{model}={path}" for model, path in zip(evaluated_models(), input.evals)),
        published=shlex.quote(json.dumps(PUBLISHED)),
    localrule: True
    container:
        image("cpu")
    shell:
        "python -m stages.report --evals {params.evals} --trained {input.trained}"
        " --mixture {input.mixture} --reward_models {input.reward_models} --published {params.published}"
        " --output_dir {output} > {log} 2>&1"
