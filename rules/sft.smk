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
