# Supervised fine-tuning stages (TRL SFTTrainer): cold-start SFT (Dev1).


rule cold_start_sft:
    input:
        model=model_input("base"),
        data=data_file("cold_start"),
    output:
        directory(result("cold_start_sft")),
    log:
        log_file("cold_start_sft"),
    benchmark:
        benchmark_file("cold_start_sft")
    params:
        model=model_ref("base"),
        work=work_dir("cold_start_sft"),
        args=stage_args(config["cold_start_sft"]),
    threads: 2
    shell:
        "python -m stages.sft --stage cold_start_sft --model_path {params.model} --train_data {input.data}"
        " --output_dir {output} --work_dir {params.work} --seed {config[seed]} {params.args} > {log} 2>&1"


rule mixture_sft:
    # Dev3: SFT on the rejection-sampled mixture, from the base model as the paper does (`init`).
    input:
        model=lambda wc: model_input(config["mixture_sft"]["init"]),
        data=result("mixture"),
    output:
        directory(result("mixture_sft")),
    log:
        log_file("mixture_sft"),
    benchmark:
        benchmark_file("mixture_sft")
    params:
        model=lambda wc: model_ref(config["mixture_sft"]["init"]),
        work=work_dir("mixture_sft"),
        args=stage_args(config["mixture_sft"], exclude=("init",)),
    threads: 2
    shell:
        "python -m stages.sft --stage mixture_sft --model_path {params.model} --train_data {input.data}/mixture.parquet"
        " --output_dir {output} --work_dir {params.work} --seed {config[seed]} {params.args} > {log} 2>&1"


rule student_base_model:
    # A tiny student, pre-trained like the base model but smaller (real configs name a hub model).
    input:
        corpus=data_file("pretrain"),
    output:
        directory(result("student_{student}")),
    log:
        log_file("student_{student}"),
    benchmark:
        benchmark_file("student_{student}")
    params:
        work=lambda wc: work_dir(f"student_{wc.student}"),
        args=lambda wc: stage_args(config["distillation"]["students"][wc.student]["build"]),
    threads: 2
    shell:
        "python -m stages.base_model --corpus {input.corpus} --output_dir {output} --work_dir {params.work}"
        " --seed {config[seed]} {params.args} > {log} 2>&1"


rule distill_student:
    # Distillation: SFT of a student on the same mixture, no RL.
    input:
        model=lambda wc: model_input(student_base(wc.student)),
        data=result("mixture"),
    output:
        directory(result("distill_{student}")),
    log:
        log_file("distill_{student}"),
    benchmark:
        benchmark_file("distill_{student}")
    params:
        model=lambda wc: model_ref(student_base(wc.student)),
        work=lambda wc: work_dir(f"distill_{wc.student}"),
        args=stage_args(config["distillation"]["sft"]),
    threads: 2
    shell:
        "python -m stages.sft --stage distill_{wildcards.student} --model_path {params.model}"
        " --train_data {input.data}/mixture.parquet --output_dir {output} --work_dir {params.work}"
        " --seed {config[seed]} {params.args} > {log} 2>&1"
