import sys, datetime as dt, pyarrow.parquet as pq, json, os
import harness as H, gen
fmt = os.environ.get('FMT','parquet'); seed=int(os.environ.get('SEED','21'))
dates=[dt.date(2026,11,1)]
wd=f'/tmp/review-sql/work/p_{fmt}_{seed}'
clean=H.setup(wd, seed, fmt, dates, int(os.environ.get('ROWS','3000')))
con=H.duck_for(clean[dates[0]])
qs=[l.rstrip('\n') for l in open(sys.argv[1]) if l.strip() and not l.startswith('#')]
for qi,q in enumerate(qs):
    ls,_,dk=q.partition(' ||| ')
    dk=dk or ls
    cfg=H.write_config(wd, fmt, sql=ls, name=f'q{qi}')
    rc,o,e=H.run_ls(cfg, dates)
    if rc!=0:
        print(f'[{qi}] RC{rc}: {ls}\n     {e.strip()[-400:]}'); continue
    t=pq.read_table(H.out_file(wd,f'q{qi}',dates[0]))
    try: dkr=con.execute(dk).fetchall()
    except Exception as ex: print(f'[{qi}] DKERR {ls}: {ex}'.replace('\n',' ')[:400]); continue
    ok,msg,det=H.compare([tuple(x.values()) for x in t.to_pylist()], dkr, ordered=' ORDER BY ' in ls)
    print(f'[{qi}] {"OK " if ok else "BAD"} {ls}' + ('' if ok else f'\n     {t.schema.types} {det}'[:1500]))
