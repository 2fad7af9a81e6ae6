# GRPO stages (TRL GRPOTrainer): R1-Zero straight on the base model, and reasoning RL (Dev2) on Dev1.


rule r1_zero_grpo:
    input:
        model=model_input("base"),
        prompts=data_file("rl_prompts"),
    output:
        directory(result("r1_zero")),
    log:
        log_file("r1_zero"),
    benchmark:
        benchmark_file("r1_zero")
    params:
        model=model_ref("base"),
        template=template_for_stage("r1_zero"),
        work=work_dir("r1_zero"),
        args=stage_args(config["r1_zero"]),
    threads: 2
    shell:
        "python -m stages.grpo --stage r1_zero --template {params.template} --model_path {params.model}"
        " --train_data {input.prompts} --output_dir {output} --work_dir {params.work} --seed {config[seed]}"
        " {params.args} > {log} 2>&1"


rule reasoning_rl:
    input:
        model=result("cold_start_sft"),
        prompts=data_file("rl_prompts"),
    output:
        directory(result("reasoning_rl")),
    log:
        log_file("reasoning_rl"),
    benchmark:
        benchmark_file("reasoning_rl")
    params:
        template=template_for_stage("reasoning_rl"),
        work=work_dir("reasoning_rl"),
        args=stage_args(config["reasoning_rl"]),
    threads: 2
    shell:
        "python -m stages.grpo --stage reasoning_rl --template {params.template} --model_path {input.model}"
        " --train_data {input.prompts} --output_dir {output} --work_dir {params.work} --seed {config[seed]}"
        " {params.args} > {log} 2>&1"
