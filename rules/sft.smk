# Supervised fine-tuning stages (TRL SFTTrainer): cold-start SFT (Dev1).


rule cold_start_sft:
    input:
        model=model_path("base"),
        data=data_file("cold_start"),
    output:
        directory(result("cold_start_sft")),
    log:
        log_file("cold_start_sft"),
    benchmark:
        benchmark_file("cold_start_sft")
    params:
        seed=config["seed"],
        launch=launcher("cold_start_sft", "stages.sft"),
        work=work_dir("cold_start_sft"),
        args=stage_args(config["cold_start_sft"]) + tracking_args("cold_start_sft"),
    threads: 2
    resources:
        **stage_resources("cold_start_sft"),
    container:
        container_image("cold_start_sft")
    shell:
        "{params.launch} --stage cold_start_sft --model_path {input.model} --train_data {input.data}"
        " --output_dir {output} --work_dir {params.work} --seed {params.seed} {params.args} > {log} 2>&1"


rule mixture_sft:
    # Dev3: SFT on the rejection-sampled mixture, from the base model as the paper does (`init`).
    input:
        model=lambda wc: model_path(config["mixture_sft"]["init"]),
        data=artifact("mixture"),
    output:
        directory(result("mixture_sft")),
    log:
        log_file("mixture_sft"),
    benchmark:
        benchmark_file("mixture_sft")
    params:
        seed=config["seed"],
        launch=launcher("mixture_sft", "stages.sft"),
        mixture=os.path.join(artifact("mixture"), MIXTURE),
        work=work_dir("mixture_sft"),
        args=stage_args(config["mixture_sft"], exclude=("init",)) + tracking_args("mixture_sft"),
    threads: 2
    resources:
        **stage_resources("mixture_sft"),
    container:
        container_image("mixture_sft")
    shell:
        "{params.launch} --stage mixture_sft --model_path {input.model} --train_data {params.mixture}"
        " --output_dir {output} --work_dir {params.work} --seed {params.seed} {params.args} > {log} 2>&1"


rule distill_student:
    # Distillation: SFT of a student on the same mixture, no RL.
    input:
        model=lambda wc: model_path(student_base(wc.student)),
        data=artifact("mixture"),
    output:
        directory(result("distill_{student}")),
    log:
        log_file("distill_{student}"),
    benchmark:
        benchmark_file("distill_{student}")
    params:
        seed=config["seed"],
        launch=launcher("distill", "stages.sft"),
        mixture=os.path.join(artifact("mixture"), MIXTURE),
        work=lambda wc: work_dir(f"distill_{wc.student}"),
        args=lambda wc: stage_args({**config["distillation"]["sft"],
                                    **config["distillation"]["students"][wc.student].get("sft", {})})
                        + tracking_args(f"distill_{wc.student}"),
    threads: 2
    resources:
        **stage_resources("distill"),
    container:
        container_image("distill")
    shell:
        "{params.launch} --stage distill_{wildcards.student} --model_path {input.model}"
        " --train_data {params.mixture} --output_dir {output} --work_dir {params.work}"
        " --seed {params.seed} {params.args} > {log} 2>&1"
