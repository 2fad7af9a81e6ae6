# The report: the paper-style stage table over every evaluated model, what each training stage did
# and its curves, sampled completions, the mixture's counts and the reward models' accuracy.

# It covers what the config evaluates (evaluation.models) and what those models are made from, so that a config
# evaluating the R1-Zero branch reports that branch alone.
REPORTED = needed_for(evaluated_models())
REWARD_MODELS = [artifact(output) for output in stage_outputs("reward_model") if output in REPORTED]
TRAINED = [artifact(output) for output in stage_outputs("grpo", "sft", "reward_model") if output in REPORTED]
REPORTED_MIXTURE = [artifact("rejection_sampling")] * ("rejection_sampling" in REPORTED)


rule report:
    input:
        evals=[eval_dir(stage) for stage in evaluated_models()],
        trained=TRAINED,
        mixture=REPORTED_MIXTURE,
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
        mixture=lambda wildcards, input: f" --mixture {input.mixture}" if input.mixture else "",
        reward_models=lambda wildcards, input: f" --reward_models {input.reward_models}" if input.reward_models else "",
    localrule: True
    container:
        image("cpu")
    shell:
        "python -m stages.report --evals {params.evals} --trained {input.trained}"
        "{params.mixture}{params.reward_models} --published {params.published}"
        " --output_dir {output} > {log} 2>&1"
