# Rejection sampling: Dev2 samples responses per prompt in shards (scatter), then verification,
# filters and the mixture with the non-reasoning share (gather). The same modules build the cold start
# from R1-Zero's samples where cold_start_data.source says so.


rule generate:
    input:
        model=artifact("reasoning_rl"),
        prompts=data_input("rl_prompts", "generate"),
        projection=projection_gate,
    output:
        shard_file("{shard}"),
    log:
        log_file("generate/shard-{shard}"),
    benchmark:
        benchmark_file("generate/shard-{shard}")
    params:
        seed=config["seed"],
        work=lambda wc: os.path.join(work_dir("generate"), f"shard-{wc.shard}.jsonl"),
        num_shards=config["rejection_sampling"]["num_shards"],
        template=template_of("reasoning_rl"),
        args=stage_args(config["rejection_sampling"]["generation"]),
    threads: 1
    resources:
        **stage_resources("generate"),
    container:
        container_image("generate")
    shell:
        "python -m stages.generate --model_path {input.model} --prompts {input.prompts} --template {params.template}"
        " --shard_index {wildcards.shard} --num_shards {params.num_shards} --work_file {params.work}"
        " --output_file {output} --seed {params.seed} {params.args} > {log} 2>&1"


if projection_shards():
    # The first shards' accept rates, projected to every shard: a target out of reach stops the DAG here,
    # before the other shards spend their GPUs (the mixture's own check comes after all of them).

    rule rejection_projection:
        input:
            shards=all_shard_files()[: projection_shards()],
            general=data_input("general", "rejection_projection"),
        output:
            projection_file(),
        log:
            log_file("rejection_projection"),
        benchmark:
            benchmark_file("rejection_projection")
        params:
            seed=config["seed"],
            num_shards=config["rejection_sampling"]["num_shards"],
            targets=targets_arg(config["rejection_sampling"]),
            template=template_of("reasoning_rl"),
            language=reasoning_language(),
            args=stage_args(config["rejection_sampling"]["filters"]),
            judged=judged_domains_arg(),
            work=work_dir("rejection_sampling"),
        retries: 0  # the same shards give the same projection: a retry would fail as the first try did
        resources:
            **stage_resources("rejection_sampling"),
        container:
            container_image("rejection_sampling")
        shell:
            "python -m stages.rejection_sampling --stage rejection_sampling --shards {input.shards}"
            " --general_data {input.general} --targets {params.targets} --template {params.template}"
            " --language {params.language} --projection_file {output} --projected_num_shards {params.num_shards}"
            " --work_dir {params.work} --seed {params.seed} {params.args} {params.judged} > {log} 2>&1"


rule rejection_sampling:
    input:
        shards=all_shard_files(),
        general=data_input("general", "rejection_sampling"),
        **judge_inputs(),
    output:
        directory(result("rejection_sampling")),
    log:
        log_file("rejection_sampling"),
    benchmark:
        benchmark_file("rejection_sampling")
    params:
        seed=config["seed"],
        targets=targets_arg(config["rejection_sampling"]),
        template=template_of("reasoning_rl"),
        language=reasoning_language(),
        args=stage_args(config["rejection_sampling"]["filters"]),
        judge=judge_args(),
        work=work_dir("rejection_sampling"),
    resources:
        **stage_resources("rejection_sampling"),
    container:
        container_image("rejection_sampling")
    shell:
        "python -m stages.rejection_sampling --stage rejection_sampling --shards {input.shards} --general_data {input.general}"
        " --targets {params.targets} --template {params.template} --language {params.language}"
        " --output_dir {output} --work_dir {params.work} --seed {params.seed}"
        " {params.args} {params.judge} > {log} 2>&1"


if COLD_START_SOURCE == "r1_zero":
    # The cold start from R1-Zero's own samples (paper, Supplementary B.3.2): R1-Zero answers the RL
    # prompts in its template, the same filters keep what is right and readable, rewritten into the chat
    # format Dev1 learns.

    rule cold_start_samples:
        input:
            model=artifact("r1_zero"),
            prompts=data_input("rl_prompts", "cold_start_samples"),
        output:
            result(STAGES["cold_start_samples"].output, "samples.jsonl"),
        log:
            log_file("cold_start_samples"),
        benchmark:
            benchmark_file("cold_start_samples")
        params:
            seed=config["seed"],
            work=os.path.join(work_dir("cold_start_samples"), "samples.jsonl"),
            template=template_of("r1_zero"),
            args=stage_args(settings_at(config, STAGES["cold_start_samples"].settings)),
        threads: 2
        resources:
            **stage_resources(STAGES["cold_start_samples"].compute),
        container:
            container_image(STAGES["cold_start_samples"].compute)
        shell:
            "python -m stages.generate --model_path {input.model} --prompts {input.prompts} --template {params.template}"
            " --work_file {params.work} --output_file {output} --seed {params.seed} {params.args} > {log} 2>&1"

    rule cold_start_data:
        input:
            samples=rules.cold_start_samples.output,
        output:
            directory(result("cold_start_data")),
        log:
            log_file("cold_start_data"),
        benchmark:
            benchmark_file("cold_start_data")
        params:
            seed=config["seed"],
            targets=targets_arg(config["cold_start_data"]),
            template=template_of("r1_zero"),
            language=reasoning_language(),
            args=stage_args(config["cold_start_data"].get("filters", {})),
            work=work_dir("cold_start_data"),
        resources:
            **stage_resources(STAGES["cold_start_data"].compute),
        container:
            container_image(STAGES["cold_start_data"].compute)
        shell:
            "python -m stages.rejection_sampling --stage cold_start_data --shards {input.samples} --targets {params.targets}"
            " --template {params.template} --language {params.language} --output_dir {output}"
            " --work_dir {params.work} --seed {params.seed} {params.args} > {log} 2>&1"
