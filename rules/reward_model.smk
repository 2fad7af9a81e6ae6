# Reward models (TRL RewardTrainer): helpfulness and harmlessness, from preference pairs.


rule reward_model:
    input:
        model=lambda wc: model_path(config["reward_model"]["init"]),
        data=data_file("preferences_{kind}"),
    output:
        directory(result("reward_model_{kind}")),
    log:
        log_file("reward_model_{kind}"),
    benchmark:
        benchmark_file("reward_model_{kind}")
    params:
        seed=config["seed"],
        launch=launcher("reward_model", "stages.reward_model"),
        work=lambda wc: work_dir(f"reward_model_{wc.kind}"),
        args=lambda wc: stage_args(config["reward_model"][wc.kind]) + tracking_args(f"reward_model_{wc.kind}"),
    threads: 2
    resources:
        **stage_resources("reward_model"),
    container:
        container_image("reward_model")
    shell:
        "{params.launch} --kind {wildcards.kind} --model_path {input.model} --data {input.data}"
        " --output_dir {output} --work_dir {params.work} --seed {params.seed} {params.args} > {log} 2>&1"
