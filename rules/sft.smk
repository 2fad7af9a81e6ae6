# Supervised fine-tuning stages (TRL SFTTrainer): cold-start SFT (Dev1).


rule cold_start_sft:
    input:
        model=model_path("base"),
        data=cold_start_input(),
        chat_template=chat_template_input("base", "cold_start_sft"),
    output:
        directory(result("cold_start_sft")),
    log:
        log_file("cold_start_sft"),
    benchmark:
        benchmark_file("cold_start_sft")
    params:
        **training_params("cold_start_sft"),
        data=cold_start_file,
        chat_template=chat_template_arg("base"),
    threads: 2
    resources:
        **stage_resources("cold_start_sft"),
    container:
        container_image("cold_start_sft")
    shell:
        "{params.launch} --model_path {input.model} --train_data {params.data}{params.chat_template}" + TRAINED_INTO


rule mixture_sft:
    # Dev3: SFT on the rejection-sampled mixture, from the base model as the paper does (`init`).
    input:
        model=lambda wc: model_path(config["mixture_sft"]["init"]),
        data=artifact("rejection_sampling"),
        chat_template=chat_template_input(config["mixture_sft"]["init"], "mixture_sft"),
    output:
        directory(result("mixture_sft")),
    log:
        log_file("mixture_sft"),
    benchmark:
        benchmark_file("mixture_sft")
    params:
        **training_params("mixture_sft", exclude=("init",)),
        mixture=os.path.join(artifact("rejection_sampling"), MIXTURE),
        chat_template=chat_template_arg(config["mixture_sft"]["init"]),
    threads: 2
    resources:
        **stage_resources("mixture_sft"),
    container:
        container_image("mixture_sft")
    shell:
        "{params.launch} --model_path {input.model} --train_data {params.mixture}{params.chat_template}" + TRAINED_INTO


rule distill:
    # Distillation: SFT of a student on the same mixture, no RL.
    input:
        model=lambda wc: model_path(student_base(wc.student)),
        data=artifact("rejection_sampling"),
        chat_template=chat_template_input(lambda wc: student_base(wc.student), "distill"),
    output:
        directory(result("distill_{student}")),
    log:
        log_file("distill_{student}"),
    benchmark:
        benchmark_file("distill_{student}")
    params:
        **training_params("distill"),
        mixture=os.path.join(artifact("rejection_sampling"), MIXTURE),
        chat_template=lambda wc: chat_template_arg(student_base(wc.student)),
    threads: 2
    resources:
        **stage_resources("distill"),
    container:
        container_image("distill")
    shell:
        "{params.launch} --model_path {input.model} --train_data {params.mixture}{params.chat_template}" + TRAINED_INTO
