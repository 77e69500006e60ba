# bash completion for ckptfs (installed to share/bash-completion/completions/ckptfs)
_ckptfs() {
	local cur prev verb
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	verb=${COMP_WORDS[1]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "inspect convert mount diff check-mapping mappings version help" -- "$cur"))
		return
	fi
	case $prev in
	--mapping | --inverse)
		# shipped mappings by name, and files
		local names
		names=$("${COMP_WORDS[0]}" mappings 2>/dev/null | awk '{print $1}')
		COMPREPLY=($(compgen -W "$names" -- "$cur") $(compgen -f -- "$cur"))
		return ;;
	--dtype) COMPREPLY=($(compgen -W "F32 F16 BF16 F8_E4M3 F8_E5M2" -- "$cur")); return ;;
	--device) COMPREPLY=($(compgen -W "cpu cuda auto" -- "$cur")); return ;;
	--model) COMPREPLY=($(compgen -W "llama gpt2 mixtral" -- "$cur")); return ;;
	--for | --source | --expect) COMPREPLY=($(compgen -f -- "$cur")); return ;;
	esac
	local opts
	case $verb in
	inspect) opts="--mapping --json --groups --expect --io-plan --explain --mesh --rank --shard-groups --world-size" ;;
	convert) opts="--mapping --max-shard-size --dtype --overwrite --threads --no-uring --odirect --progress --quiet --device --gpu-mem --gpu-min --mesh --rank --shard-groups --world-size" ;;
	mount) opts="--mapping --device -f -o --mesh --rank --ranks --shard-groups --world-size --help" ;;
	diff) opts="--mapping --atol --rtol --ulp --json --threads --no-uring" ;;
	check-mapping) opts="--inverse --model --source --fp8-block --set" ;;
	mappings) opts="--for --json" ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$opts --help" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -F _ckptfs ckptfs
