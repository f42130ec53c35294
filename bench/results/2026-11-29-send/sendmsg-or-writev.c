#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  int n=atoi(argv[1]); int size=atoi(argv[2]); int head=200;
  int l=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={0}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(0x7f000001);
  int one=1; setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);
  bind(l,(void*)&a,sizeof a); socklen_t al=sizeof a; getsockname(l,(void*)&a,&al); listen(l,1);
  int c=socket(AF_INET,SOCK_STREAM,0); connect(c,(void*)&a,sizeof a); int s=accept(l,0,0);
  setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,4);
  char *h=malloc(head), *buf=malloc(size), *joined=malloc(head+size), *rb=malloc(65536); memset(buf,'x',size); memset(h,'h',head);
  const char *names[]={"writev2","sendmsg2","copy+send"};
  double sum[3]={0};
  for(int mode=0;mode<9;mode++){
    int m=mode%3; double t0=now(); int tot=head+size;
    for(int i=0;i<n;i++){
      ssize_t w;
      struct iovec v[2]={{h,head},{buf,size}};
      if(m==0){ w=writev(c,v,2);}
      else if(m==1){struct msghdr mh={0}; mh.msg_iov=v; mh.msg_iovlen=2; w=sendmsg(c,&mh,MSG_NOSIGNAL);}
      else {memcpy(joined,h,head); memcpy(joined+head,buf,size); w=send(c,joined,tot,MSG_NOSIGNAL);}
      if(w!=tot){perror("w");return 1;}
      ssize_t got=0; while(got<tot){ssize_t r=recv(s,rb,65536,0); if(r<=0){perror("r");return 1;} got+=r;}
    }
    sum[m]+=(now()-t0)/n*1e9;
  }
  for(int m=0;m<3;m++) printf("%s %d+%d: %.0f ns  ", names[m], head,size,sum[m]/3); printf("\n");
}
